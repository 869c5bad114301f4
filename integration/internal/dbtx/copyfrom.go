package dbtx

import (
	"context"
)

// iteratorForInsertItems implements pgx.CopyFromSource.
type iteratorForInsertItems struct {
	rows                 []InsertItemsParams
	skippedFirstNextCall bool
}

func (r *iteratorForInsertItems) Next() bool {
	if len(r.rows) == 0 {
		return false
	}
	if !r.skippedFirstNextCall {
		r.skippedFirstNextCall = true
		return true
	}
	r.rows = r.rows[1:]
	return len(r.rows) > 0
}

func (r iteratorForInsertItems) Values() ([]interface{}, error) {
	return []interface{}{
		r.rows[0].ID,
		r.rows[0].Name,
	}, nil
}

func (r iteratorForInsertItems) Err() error {
	return nil
}

// InsertItems copies arg into items (-- name: InsertItems :copyfrom).
func (q *Queries) InsertItems(ctx context.Context, arg []InsertItemsParams) (int64, error) {
	return q.db.CopyFrom(ctx, []string{"items"}, []string{"id", "name"}, &iteratorForInsertItems{rows: arg})
}
