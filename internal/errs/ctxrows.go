package errs

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// CtxRows is a query's pgx.Rows whose Err and Scan match ctx.Err() when the
// context ended the statement ([WithContext]).
type CtxRows struct {
	pgx.Rows
	Ctx context.Context
}

// Err is the rows' error, matching ctx.Err() when ctx has ended.
func (r *CtxRows) Err() error { return WithContext(r.Ctx, r.Rows.Err()) }

// Scan is the rows' Scan, its error matching ctx.Err() when ctx has ended.
func (r *CtxRows) Scan(dest ...any) error { return WithContext(r.Ctx, r.Rows.Scan(dest...)) }

// CtxRow is a query's pgx.Row whose Scan matches ctx.Err() when the context
// ended the statement.
type CtxRow struct {
	Row pgx.Row
	Ctx context.Context
}

// Scan is the row's Scan, its error matching ctx.Err() when ctx has ended.
func (r CtxRow) Scan(dest ...any) error { return WithContext(r.Ctx, r.Row.Scan(dest...)) }

// CtxBatchResults is a batch's pgx.BatchResults whose every error matches
// ctx.Err() when the context ended the batch.
type CtxBatchResults struct {
	Results pgx.BatchResults
	Ctx     context.Context
}

// Exec reads the next result as Exec does.
func (b *CtxBatchResults) Exec() (pgconn.CommandTag, error) {
	tag, err := b.Results.Exec()
	return tag, WithContext(b.Ctx, err)
}

// Query reads the next result as rows.
func (b *CtxBatchResults) Query() (pgx.Rows, error) {
	rows, err := b.Results.Query()
	return &CtxRows{Rows: rows, Ctx: b.Ctx}, WithContext(b.Ctx, err)
}

// QueryRow reads the next result as one row.
func (b *CtxBatchResults) QueryRow() pgx.Row { return CtxRow{Row: b.Results.QueryRow(), Ctx: b.Ctx} }

// Close closes the results.
func (b *CtxBatchResults) Close() error { return WithContext(b.Ctx, b.Results.Close()) }

// Tx is nil outside a transaction, as pgxpool's.
func (b *CtxBatchResults) Tx() pgx.Tx { return b.Results.Tx() }
