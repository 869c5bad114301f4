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
	return &ctxRows{Rows: rows, ctx: ctx}, withContextErr(ctx, err)
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
	return ctxRow{row: row, ctx: ctx}
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
	return &ctxBatchResults{br: br, ctx: ctx}
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

type ctxRows struct {
	pgx.Rows
	ctx context.Context
}

func (r *ctxRows) Err() error             { return withContextErr(r.ctx, r.Rows.Err()) }
func (r *ctxRows) Scan(dest ...any) error { return withContextErr(r.ctx, r.Rows.Scan(dest...)) }

type ctxRow struct {
	row pgx.Row
	ctx context.Context
}

func (r ctxRow) Scan(dest ...any) error { return withContextErr(r.ctx, r.row.Scan(dest...)) }

type ctxBatchResults struct {
	br  pgx.BatchResults
	ctx context.Context
}

func (b *ctxBatchResults) Exec() (pgconn.CommandTag, error) {
	tag, err := b.br.Exec()
	return tag, withContextErr(b.ctx, err)
}

func (b *ctxBatchResults) Query() (pgx.Rows, error) {
	rows, err := b.br.Query()
	return &ctxRows{Rows: rows, ctx: b.ctx}, withContextErr(b.ctx, err)
}

func (b *ctxBatchResults) QueryRow() pgx.Row { return ctxRow{row: b.br.QueryRow(), ctx: b.ctx} }
func (b *ctxBatchResults) Close() error      { return withContextErr(b.ctx, b.br.Close()) }
func (b *ctxBatchResults) Tx() pgx.Tx        { return b.br.Tx() }

// errPoolNotOpened is the error of every method of a Pool that New or
// NewWithConfig did not make (a zero Pool).
var errPoolNotOpened = &invalidArgError{Msg: "the Pool was not created by New or NewWithConfig"}
