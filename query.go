package pgtx

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/errs"
)

// The query methods of Pool are those of pgxpool.Pool with two
// differences. When the context ended the statement, the error matches
// ctx.Err() (as with pgx's default handling) while the server's 57014 stays
// reachable with errors.As; with server-side cancellation the server
// answers the cancel with 57014, and the connection is kept. And when no
// connection can be made to the server (it refuses, starts up, shuts down,
// or no host takes writes during a failover), a statement waits for it
// within its context's deadline, or [RetryConfig].UnavailableTimeout
// without one: nothing had been sent.

// Exec is pgxpool.Pool.Exec; see the note on the query methods above.
func (p *Pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if p == nil || p.pool == nil {
		return pgconn.CommandTag{}, errPoolNotOpened
	}
	c, err := p.conn(ctx)
	if err != nil {
		return pgconn.CommandTag{}, withContextErr(ctx, err)
	}
	defer c.Release()
	tag, err := c.Exec(ctx, sql, args...)
	return tag, withContextErr(ctx, err)
}

// Query is pgxpool.Pool.Query; the returned Rows' Err and Scan match
// ctx.Err() when the context ended the statement.
func (p *Pool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if p == nil || p.pool == nil {
		return errs.NewRows(errPoolNotOpened), errPoolNotOpened
	}
	c, err := p.conn(ctx)
	if err != nil {
		err = withContextErr(ctx, err)
		return errs.NewRows(err), err
	}
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		c.Release()
		err = withContextErr(ctx, err)
		return errs.NewRows(err), err
	}
	pr := &poolRows{r: rows, c: c}
	if ctx.Done() == nil {
		return pr, nil
	}
	return &errs.CtxRows{Rows: pr, Ctx: ctx}, nil
}

// QueryRow is pgxpool.Pool.QueryRow; Scan's error matches ctx.Err() when the
// context ended the statement.
func (p *Pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if p == nil || p.pool == nil {
		return errs.NewRows(errPoolNotOpened)
	}
	c, err := p.conn(ctx)
	if err != nil {
		return errs.NewRows(withContextErr(ctx, err))
	}
	row := &poolRow{r: c.QueryRow(ctx, sql, args...), c: c}
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
	c, err := p.conn(ctx)
	if err != nil {
		return pgx.FailedBatchResults(b, withContextErr(ctx, err))
	}
	br := &poolBatch{br: c.SendBatch(ctx, b), c: c}
	if tx := br.br.Tx(); tx != nil {
		br.c, br.tx = nil, &poolTx{Tx: tx, c: c}
	}
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
	c, err := p.conn(ctx)
	if err != nil {
		return 0, withContextErr(ctx, err)
	}
	defer c.Release()
	n, err := c.Conn().CopyFrom(ctx, tableName, columnNames, rowSrc)
	return n, withContextErr(ctx, err)
}

// errPoolNotOpened is the error of every method of a Pool that New or
// NewWithConfig did not make (a zero Pool).
var errPoolNotOpened = &invalidArgError{Msg: "the Pool was not created by New or NewWithConfig"}
