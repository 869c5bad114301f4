package pgtx

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/errs"
)

// The query methods of Pool are those of pgxpool.Pool with one difference:
// when the context ended the statement, the error matches ctx.Err() (as with
// pgx's default handling) while the server's 57014 stays reachable with
// errors.As. With server-side cancellation the server answers the cancel
// with 57014, and the connection is kept.

// Exec is pgxpool.Pool.Exec; see the note on the query methods above.
func (p *Pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if p == nil || p.pool == nil {
		return pgconn.CommandTag{}, errPoolNotOpened
	}
	tag, err := p.pool.Exec(ctx, sql, args...)
	return tag, withContextErr(ctx, err)
}

// Query is pgxpool.Pool.Query; the returned Rows' Err and Scan match
// ctx.Err() when the context ended the statement.
func (p *Pool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if p == nil || p.pool == nil {
		return errs.NewRows(errPoolNotOpened), errPoolNotOpened
	}
	rows, err := p.pool.Query(ctx, sql, args...)
	if ctx.Done() == nil {
		return rows, err
	}
	return &errs.CtxRows{Rows: rows, Ctx: ctx}, withContextErr(ctx, err)
}

// QueryRow is pgxpool.Pool.QueryRow; Scan's error matches ctx.Err() when the
// context ended the statement.
func (p *Pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if p == nil || p.pool == nil {
		return errs.NewRows(errPoolNotOpened)
	}
	row := p.pool.QueryRow(ctx, sql, args...)
	if ctx.Done() == nil {
		return row
	}
	return errs.CtxRow{Row: row, Ctx: ctx}
}

// SendBatch is pgxpool.Pool.SendBatch; the errors of the returned
// BatchResults match ctx.Err() when the context ended the batch.
func (p *Pool) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if p == nil || p.pool == nil {
		return pgx.FailedBatchResults(b, errPoolNotOpened)
	}
	br := p.pool.SendBatch(ctx, b)
	if ctx.Done() == nil {
		return br
	}
	return &errs.CtxBatchResults{Results: br, Ctx: ctx}
}

// CopyFrom is pgxpool.Pool.CopyFrom; see the note on the query methods
// above.
func (p *Pool) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	if p == nil || p.pool == nil {
		return 0, errPoolNotOpened
	}
	n, err := p.pool.CopyFrom(ctx, tableName, columnNames, rowSrc)
	return n, withContextErr(ctx, err)
}

// errPoolNotOpened is the error of every method of a Pool that New or
// NewWithConfig did not make (a zero Pool).
var errPoolNotOpened = &invalidArgError{Msg: "the Pool was not created by New or NewWithConfig"}
