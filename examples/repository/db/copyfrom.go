// Code in the style sqlc generates; written by hand for this example.
// source: copyfrom.go

package db

import (
	"context"
)

// iteratorForCreateAccounts implements pgx.CopyFromSource.
type iteratorForCreateAccounts struct {
	rows                 []CreateAccountsParams
	skippedFirstNextCall bool
}

func (r *iteratorForCreateAccounts) Next() bool {
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

func (r iteratorForCreateAccounts) Values() ([]interface{}, error) {
	return []interface{}{
		r.rows[0].Owner,
		r.rows[0].Balance,
	}, nil
}

func (r iteratorForCreateAccounts) Err() error {
	return nil
}

// CreateAccounts inserts many accounts with the copy protocol and returns
// how many it inserted.
func (q *Queries) CreateAccounts(ctx context.Context, arg []CreateAccountsParams) (int64, error) {
	return q.db.CopyFrom(ctx, []string{"accounts"}, []string{"owner", "balance"}, &iteratorForCreateAccounts{rows: arg})
}
