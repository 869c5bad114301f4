package pgtx

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/errs"
)

// Exec is pgxpool.Pool.Exec. When the context ended the statement, the
// error matches ctx.Err(), and the connection is kept. When no connection
// can be made, it waits for the server within the context's deadline or
// [RetryConfig].UnavailableTimeout (nothing had been sent), and then
// returns a [RetryError] saying so, as [Transaction] does. A connection
// whose session the server ended while it was idle (a restart) is not
// used.
func (p *Pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if p == nil || p.pool == nil {
		return pgconn.CommandTag{}, errPoolNotOpened
	}
	c, err := p.conn(ctx)
	if err != nil {
		return pgconn.CommandTag{}, withContextErr(ctx, err)
	}
	defer p.release(c)
	tag, err := c.Exec(ctx, sql, args...)
	return tag, withContextErr(ctx, err)
}

// Query is pgxpool.Pool.Query, as [Pool.Exec] for the context and an
// unreachable server.
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

// QueryRow is pgxpool.Pool.QueryRow, as [Pool.Exec] for the context and an
// unreachable server.
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

// SendBatch is pgxpool.Pool.SendBatch, as [Pool.Exec] for the context and
// an unreachable server.
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

// CopyFrom is pgxpool.Pool.CopyFrom, as [Pool.Exec] for the context and an
// unreachable server.
func (p *Pool) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	if p == nil || p.pool == nil {
		return 0, errPoolNotOpened
	}
	c, err := p.conn(ctx)
	if err != nil {
		return 0, withContextErr(ctx, err)
	}
	defer p.release(c)
	n, err := c.Conn().CopyFrom(ctx, tableName, columnNames, rowSrc)
	return n, withContextErr(ctx, err)
}

var errPoolNotOpened = invalidArg("the Pool was not created by New or NewWithConfig")

// conn returns a connection of p. When none can be made, it waits for the
// server as Transaction does, and says so the same way (a [RetryError]);
// a statement already sent is never sent again.
func (p *Pool) conn(ctx context.Context) (*pgxpool.Conn, error) {
	c, err := p.openConn(ctx)
	if err == nil || !unreachable(ctx, err) {
		return c, err
	}
	first := err // the first attempt's, made before the loop
	loop := p.loop
	err = loop.Run(ctx, func(ctx context.Context) (classify.Class, error) {
		if err := first; err != nil {
			first = nil
			return classify.Unavailable, err
		}
		c, err = p.openConn(ctx)
		switch {
		case err == nil:
			return classify.None, nil
		case unreachable(ctx, err):
			return classify.Unavailable, err
		}
		return classify.Permanent, err
	})
	return c, err
}

// release gives c back, and then wakes an acquire waiting for a held
// connection, which the release tracer woke too early.
func (p *Pool) release(c *pgxpool.Conn) {
	c.Release()
	p.slots.limit.Back()
}

// openConn returns a connection of p that is open: one whose session the
// server ended while it was idle is not used.
func (p *Pool) openConn(ctx context.Context) (*pgxpool.Conn, error) {
	for closed := 0; ; {
		c, err := p.slots.Acquire(ctx)
		switch {
		case err != nil:
			return nil, err
		case !c.Conn().IsClosed():
			return c, nil
		}
		c.Release()
		if closed++; closed > int(p.cfg.MaxConns) {
			return nil, pgconn.ErrConnClosed
		}
	}
}

// unreachable reports a connect that failed for want of a server, while
// ctx still runs: what a plain statement waits out.
func unreachable(ctx context.Context, err error) bool {
	var connectErr *pgconn.ConnectError
	return ctx.Err() == nil && errors.As(err, &connectErr) && Classify(err) == ClassUnavailable
}

// poolRows, poolRow and poolBatch release their connection when done, as
// pgxpool's own do.
type poolRows struct {
	r pgx.Rows
	c *pgxpool.Conn
}

func (rows *poolRows) Close() {
	rows.r.Close()
	if rows.c != nil {
		rows.c.Release()
		rows.c = nil
	}
}

func (rows *poolRows) Err() error                    { return rows.r.Err() }
func (rows *poolRows) CommandTag() pgconn.CommandTag { return rows.r.CommandTag() }
func (rows *poolRows) FieldDescriptions() []pgconn.FieldDescription {
	return rows.r.FieldDescriptions()
}
func (rows *poolRows) RawValues() [][]byte  { return rows.r.RawValues() }
func (rows *poolRows) Conn() *pgx.Conn      { return rows.r.Conn() }
func (rows *poolRows) TypeMap() *pgtype.Map { return rows.r.TypeMap() }

func (rows *poolRows) Next() bool {
	n := rows.r.Next()
	if !n {
		rows.Close()
	}
	return n
}

func (rows *poolRows) Scan(dest ...any) error {
	err := rows.r.Scan(dest...)
	if err != nil {
		rows.Close()
	}
	return err
}

func (rows *poolRows) Values() ([]any, error) {
	values, err := rows.r.Values()
	if err != nil {
		rows.Close()
	}
	return values, err
}

type poolRow struct {
	r pgx.Row
	c *pgxpool.Conn
}

func (row *poolRow) Scan(dest ...any) error {
	defer row.c.Release()
	return row.r.Scan(dest...)
}

// A batch that began a transaction leaves the connection to that
// transaction.
type poolBatch struct {
	br pgx.BatchResults
	c  *pgxpool.Conn
	tx *poolTx
}

func (b *poolBatch) Exec() (pgconn.CommandTag, error) { return b.br.Exec() }
func (b *poolBatch) Query() (pgx.Rows, error)         { return b.br.Query() }
func (b *poolBatch) QueryRow() pgx.Row                { return b.br.QueryRow() }

func (b *poolBatch) Close() error {
	err := b.br.Close()
	if b.c != nil {
		b.c.Release()
		b.c = nil
	}
	return err
}

func (b *poolBatch) Tx() pgx.Tx {
	if b.tx == nil {
		return nil
	}
	return b.tx
}

type poolTx struct {
	pgx.Tx
	c *pgxpool.Conn
}

func (tx *poolTx) Commit(ctx context.Context) error {
	err := tx.Tx.Commit(ctx)
	tx.release()
	return err
}

func (tx *poolTx) Rollback(ctx context.Context) error {
	err := tx.Tx.Rollback(ctx)
	tx.release()
	return err
}

func (tx *poolTx) release() {
	if tx.c != nil {
		tx.c.Release()
		tx.c = nil
	}
}
