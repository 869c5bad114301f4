package pgtxsql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/slots"
)

// conn is a connection of the *sql.DB. It takes a connection of the pool
// for its first plain statement or transaction of its own, and keeps it, so
// that a *sql.Conn is one session, until database/sql closes it; a
// transaction of Transaction's runs on the attempt's connection instead.
type conn struct {
	c  *connector
	pc *pgxpool.Conn
	tx *tx // the transaction open on it, if any
}

// querier is what a statement runs on: the pool's connection, or a
// transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

var errBusy = errors.New("pgtxsql: a transaction is already open on this connection")

// target is where a statement goes: the open transaction, or the
// connection of the pool, taken now if need be.
func (c *conn) target(ctx context.Context) (querier, *binding, error) {
	if c.tx != nil {
		return c.tx.q, c.tx.b, nil
	}
	if err := c.take(ctx); err != nil {
		return nil, nil, err
	}
	return c.pc, nil, nil
}

// take acquires the connection of the pool, within the pool's
// AcquireTimeout. A connection a cancel destroyed is bad: database/sql then
// runs a plain statement on another, since nothing was sent. While no
// connection can be made to a server that may come back, it waits for the
// server as the pool's own statements do (within ctx's deadline or the
// pool's UnavailableTimeout), since nothing was sent either.
func (c *conn) take(ctx context.Context) error {
	if c.pc != nil {
		if c.pc.Conn().IsClosed() {
			return driver.ErrBadConn
		}
		return nil
	}
	pc, err := c.acquire(ctx)
	if err != nil && pgtx.Classify(err) == pgtx.ClassUnavailable && ctx.Err() == nil {
		if _, werr := c.c.pool.Exec(ctx, "select 1"); werr == nil {
			pc, err = c.acquire(ctx)
		}
	}
	if err != nil {
		return withContextErr(ctx, err)
	}
	c.pc = pc
	return nil
}

// acquire takes a connection of the pool. While the server's slots hold
// the pool at the connections it has ([slots.ErrNoSlot]), or when the
// server refuses it one more for lack of slots while it holds some, it
// waits for one of those until ctx ends, as the pool's own statements do.
func (c *conn) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	if t := c.c.acquireTimeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	p := c.c.pool.Pgxpool()
	var timer *time.Timer
	for pause := slotPoll; ; pause = min(2*pause, maxSlotPoll) {
		pc, err := p.Acquire(ctx)
		if err == nil || !waitForSlot(p, err) {
			return pc, err
		}
		if timer == nil {
			timer = time.NewTimer(pause)
			defer timer.Stop()
		} else {
			timer.Reset(pause)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// A plain statement waiting for a held connection tries again after
// slotPoll, doubling up to maxSlotPoll.
const (
	slotPoll    = time.Millisecond
	maxSlotPoll = 20 * time.Millisecond
)

// waitForSlot reports whether an acquire of p that failed with err waits
// for a connection p holds: the pool's slot limit held its connect back,
// or the server refused it for lack of slots while p holds connections.
func waitForSlot(p *pgxpool.Pool, err error) bool {
	if errors.Is(err, slots.ErrNoSlot) {
		return true
	}
	var connectErr *pgconn.ConnectError
	return errors.As(err, &connectErr) && pgtx.Classify(err) == pgtx.ClassOverload && p.Stat().TotalConns() > 0
}

// Prepare implements [driver.Conn].
func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return &stmt{c: c, query: query}, nil
}

// PrepareContext implements [driver.ConnPrepareContext]. The statement is
// prepared by pgx's statement cache when it first runs.
func (c *conn) PrepareContext(_ context.Context, query string) (driver.Stmt, error) {
	return &stmt{c: c, query: query}, nil
}

// Close implements [driver.Conn]: the pool's connection goes back to it.
// An own transaction still open there is rolled back by the pool.
func (c *conn) Close() error {
	if c.pc != nil {
		c.pc.Release()
		c.pc = nil
	}
	return nil
}

// Begin implements [driver.Conn].
func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx implements [driver.ConnBeginTx]. With the context of an attempt
// of Transaction or Run, it returns the attempt's transaction, and sends
// nothing: BEGIN goes with the first statement. Otherwise it begins a
// transaction of its own, which runs once.
func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.tx != nil {
		return nil, errBusy
	}
	if b := bindingOf(ctx); b != nil {
		if err := b.begin(opts); err != nil {
			return nil, err
		}
		c.tx = &tx{c: c, q: b.tx, b: b}
		return c.tx, nil
	}
	txOpts, err := pgxTxOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := c.take(ctx); err != nil {
		return nil, err
	}
	ptx, err := c.pc.BeginTx(ctx, txOpts)
	if err != nil {
		return nil, withContextErr(ctx, err)
	}
	c.tx = &tx{c: c, q: ptx, own: ptx, ctx: ctx}
	return c.tx, nil
}

// pgxTxOptions is BeginTx's options for pgx, as pgx's stdlib maps them.
func pgxTxOptions(opts driver.TxOptions) (pgx.TxOptions, error) {
	var o pgx.TxOptions
	switch sql.IsolationLevel(opts.Isolation) {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		o.IsoLevel = pgx.ReadUncommitted
	case sql.LevelReadCommitted:
		o.IsoLevel = pgx.ReadCommitted
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		o.IsoLevel = pgx.RepeatableRead
	case sql.LevelSerializable:
		o.IsoLevel = pgx.Serializable
	default:
		return o, invalidArg("pgtxsql: PostgreSQL has no isolation level " + sql.IsolationLevel(opts.Isolation).String())
	}
	if opts.ReadOnly {
		o.AccessMode = pgx.ReadOnly
	}
	return o, nil
}

// ExecContext implements [driver.ExecerContext].
func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	q, _, err := c.target(ctx)
	if err != nil {
		return nil, err
	}
	tag, err := q.Exec(ctx, query, values(args)...)
	if err != nil {
		return nil, withContextErr(ctx, err)
	}
	return driver.RowsAffected(tag.RowsAffected()), nil
}

// QueryContext implements [driver.QueryerContext]. The first row is read
// now, as pgx's stdlib does, so that an error of the statement's is the
// query's. A transaction's query whose text is known to need no result
// formats ([shapes]) is sent without them, so that it can share a write:
// the first with BEGIN, and one that may give the transaction its id with
// the read of that id.
func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, b, err := c.target(ctx)
	if err != nil {
		return nil, err
	}
	qargs := queryArgs(args)
	if b != nil && c.c.shapes.native(query) {
		qargs = qargs[1:]
	}
	r, err := q.Query(ctx, query, qargs...)
	if err != nil {
		return nil, withContextErr(ctx, err)
	}
	more := r.Next()
	if err := r.Err(); err != nil {
		r.Close()
		return nil, withContextErr(ctx, err)
	}
	rs := newRows(ctx, r, more, b)
	c.c.shapes.learn(query, r.FieldDescriptions(), rs.m)
	return rs, nil
}

// Ping implements [driver.Pinger].
func (c *conn) Ping(ctx context.Context) error {
	if c.pc != nil {
		return withContextErr(ctx, c.pc.Ping(ctx))
	}
	return c.c.pool.Ping(ctx)
}

// ResetSession implements [driver.SessionResetter]: a connection a cancel
// destroyed is not used again.
func (c *conn) ResetSession(context.Context) error {
	if !c.IsValid() {
		return driver.ErrBadConn
	}
	return nil
}

// IsValid implements [driver.Validator].
func (c *conn) IsValid() bool { return c.pc == nil || !c.pc.Conn().IsClosed() }

// CheckNamedValue implements [driver.NamedValueChecker]: pgx takes every
// value, [driver.Valuer] and [sql.Scanner] types among them, as pgx's
// stdlib says.
func (c *conn) CheckNamedValue(*driver.NamedValue) error { return nil }

func values(args []driver.NamedValue) []any {
	if len(args) == 0 {
		return nil
	}
	vs := make([]any, len(args))
	for i, a := range args {
		vs[i] = a.Value
	}
	return vs
}

// resultFormats asks for binary results only for the types rows converts
// from binary, and text for every other, as pgx's stdlib does, so that
// database/sql gets the server's text form of those.
var resultFormats = pgx.QueryResultFormatsByOID{
	pgtype.BoolOID: 1, pgtype.ByteaOID: 1, pgtype.CIDOID: 1, pgtype.DateOID: 1,
	pgtype.Float4OID: 1, pgtype.Float8OID: 1, pgtype.Int2OID: 1, pgtype.Int4OID: 1,
	pgtype.Int8OID: 1, pgtype.OIDOID: 1, pgtype.TimestampOID: 1, pgtype.TimestamptzOID: 1,
	pgtype.XIDOID: 1,
}

// queryArgs are a query's arguments after its result formats, which a
// statement that shares a write cannot carry (pgx's batches take none):
// QueryContext drops them for a transaction's query when [shapes] knows its
// text needs none.
func queryArgs(args []driver.NamedValue) []any {
	vs := make([]any, len(args)+1)
	vs[0] = resultFormats
	for i, a := range args {
		vs[i+1] = a.Value
	}
	return vs
}

// stmt is a prepared statement: its text, run on its connection.
type stmt struct {
	c     *conn
	query string
}

func (s *stmt) Close() error  { return nil }
func (s *stmt) NumInput() int { return -1 }

func (s *stmt) Exec([]driver.Value) (driver.Result, error) {
	return nil, errors.New("pgtxsql: Stmt.Exec is not used by database/sql")
}

func (s *stmt) Query([]driver.Value) (driver.Rows, error) {
	return nil, errors.New("pgtxsql: Stmt.Query is not used by database/sql")
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.c.ExecContext(ctx, s.query, args)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.c.QueryContext(ctx, s.query, args)
}
