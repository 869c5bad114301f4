package pgtx

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// BEGIN travels with fn's first statement, in one write, as pgx's
// Batch.BeginTx sends it: BEGIN, the transaction's statement_timeout when
// it has one, fn's statement, and, in a resolving pool, the read of the
// transaction's id, without assigning one. The statements after it carry
// the read too, until the transaction has an id (tracking): its id is known
// before COMMIT is sent, and a write-free transaction takes none. The statements go in the connection's own exec mode, so
// pgx's statement cache prepares pgtx's statements once per connection,
// and behind a transaction-mode pooler (QueryExecModeExec,
// QueryExecModeSimpleProtocol) they go unnamed or simple.

// capture is what the first write reads for a resolution.
type capture int

const (
	captureNone  capture = iota // nothing: the pool does not resolve, or the server cannot be asked
	captureID                   // the id (a direct connection: its run was captured when it was made)
	captureIDRun                // the id and the server's run (behind a pooler)
)

// The id reads: NULL for a transaction without an id, which they do not
// give one; the forcing ones give it one (a notification's).
const (
	idSQL          = "select pg_current_xact_id_if_assigned()::text::int8 as pgtx_xid"
	idRunSQL       = "select pg_current_xact_id_if_assigned()::text::int8 as pgtx_xid, " + resolve.RunSQL
	idForcedSQL    = "select pg_current_xact_id()::text::int8 as pgtx_xid"
	idRunForcedSQL = "select pg_current_xact_id()::text::int8 as pgtx_xid, " + resolve.RunSQL
)

// idSQLs indexes the id reads by capture and forcing.
var idSQLs = [...][2]string{captureNone: {"", ""}, captureID: {idSQL, idForcedSQL}, captureIDRun: {idRunSQL, idRunForcedSQL}}

// setTimeoutSQL sets the transaction's statement_timeout ($1, in
// milliseconds) as SET LOCAL would, with a parameter, so that it is
// prepared once whatever the value.
const setTimeoutSQL = "select set_config('statement_timeout', $1, true)"

// beginSQLs holds every BEGIN statement, indexed by isolation, read-only and
// deferrable, so that a transaction does not build its own.
var beginSQLs = func() (s [Serializable + 1][2][2]string) {
	for iso := ReadCommitted; iso <= Serializable; iso++ {
		for ro := range 2 {
			for def := range 2 {
				q := "begin isolation level " + iso.String()
				if ro == 1 {
					q += " read only"
				}
				if def == 1 {
					q += " deferrable"
				}
				s[iso][ro][def] = q
			}
		}
	}
	return s
}()

// deadlineMargin is added to the time left before the context's deadline
// when it becomes the transaction's statement_timeout: the client's own
// cancel comes first (and keeps the connection); the server's is the net
// for a client that died or a cancel that was lost.
const deadlineMargin = 100 * time.Millisecond

// statementTimeout returns the statement_timeout the transaction sets, in
// milliseconds (0: none), and whether it sets one: the call's, or the time
// left before ctx's deadline when that is shorter than the one in force.
func (a *txAttempt) statementTimeout(ctx context.Context) (int64, bool) {
	timeout := a.opts.StatementTimeout // > 0: the call's; < 0: none; 0: the session's
	inForce := a.pool.settings.statementTimeout
	if timeout != 0 {
		inForce = max(timeout, 0)
	}
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d) + deadlineMargin
		if inForce <= 0 || left < inForce {
			timeout = max(left, time.Millisecond)
		}
	}
	if timeout == 0 {
		return 0, false
	}
	return durationMillis(max(timeout, 0)), true
}

// beginBatch returns a batch that begins the transaction, with its
// statement_timeout, and reports how many results of it are BEGIN's.
func (t *attemptTx) beginBatch(ctx context.Context, n int) (*pgx.Batch, int) {
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, n+3)}
	if t.begun {
		return b, 0 // a later write, which reads the id only
	}
	b.BeginTx(pgx.TxOptions{BeginQuery: beginSQLs[t.a.iso][b2i(t.a.opts.ReadOnly)][b2i(t.a.opts.Deferrable)]})
	if ms, ok := t.a.statementTimeout(ctx); ok {
		b.Queue(setTimeoutSQL, strconv.FormatInt(ms, 10))
		return b, 2
	}
	return b, 1
}

// queueID queues the read of the id after fn's statements.
func (t *attemptTx) queueID(b *pgx.Batch) {
	if t.capture == captureNone {
		return
	}
	b.Queue(idSQLs[t.capture][b2i(t.notify)]).QueryRow(t.scanID)
}

// scanID reads the id and, behind a pooler, the server's run.
func (t *attemptTx) scanID(row pgx.Row) error {
	var xid pgtype.Int8
	var err error
	if t.capture == captureIDRun {
		err = row.Scan(&xid, &t.id.Run.Timeline, &t.id.Run.Start, &t.id.Run.Epoch, &t.id.Flushed)
	} else {
		err = row.Scan(&xid)
	}
	if err != nil {
		return err
	}
	t.idRead, t.idNull = true, !xid.Valid
	t.id.Xid = uint64(xid.Int64)
	return nil
}

// send sends b, which begins the transaction with its first skip results,
// and reads those. BEGIN's failure is the attempt's (beginErr).
func (t *attemptTx) send(ctx context.Context, b *pgx.Batch, skip int) (pgx.BatchResults, error) {
	t.begun = true
	br := t.conn.SendBatch(ctx, b)
	if skip > 0 {
		t.ptx = br.Tx()
	}
	var err error
	for range skip {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if err != nil {
		t.beginErr = err
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

// beginNow sends BEGIN alone, for what cannot share its write (a copy, a
// savepoint, a prepare, the connection handed out). A failed BEGIN closes
// the connection: what fn sends on it must never run outside the
// transaction.
func (t *attemptTx) beginNow(ctx context.Context) error {
	t.stale = true
	if t.begun {
		return nil
	}
	b, skip := t.beginBatch(ctx, 0)
	br, err := t.send(ctx, b, skip)
	if err == nil {
		err = br.Close()
		if err != nil {
			t.beginErr = err
		}
	}
	if err != nil {
		closeConn(t.conn)
	}
	return err
}

// firstBatch sends fn's batch b after BEGIN, and the id read after it.
func (t *attemptTx) firstBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	nb, skip := t.beginBatch(ctx, len(b.QueuedQueries))
	nb.QueuedQueries = append(nb.QueuedQueries, b.QueuedQueries...)
	t.queueID(nb)
	br, err := t.send(ctx, nb, skip)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return br
}

// firstExec runs fn's first statement, with arguments, after BEGIN.
func (t *attemptTx) firstExec(ctx context.Context, sql string, args []any) (tag pgconn.CommandTag, err error) {
	if c := t.lean(args); c != nil {
		return t.leanExec(ctx, c, sql, args)
	}
	ctx, end := t.traceQuery(ctx, sql, args)
	defer func() { end(tag, err) }()
	b, skip := t.beginBatch(ctx, 1)
	b.Queue(sql, args...)
	t.queueID(b)
	br, err := t.send(ctx, b, skip)
	if err != nil {
		return tag, err
	}
	tag, err = br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// firstQuery runs fn's first query after BEGIN. The batch is closed (the id
// read) when fn closes the rows.
func (t *attemptTx) firstQuery(ctx context.Context, sql string, args []any) (pgx.Rows, error) {
	if c := t.lean(args); c != nil {
		return t.leanQuery(ctx, c, sql, args)
	}
	ctx, end := t.traceQuery(ctx, sql, args)
	b, skip := t.beginBatch(ctx, 1)
	b.Queue(sql, args...)
	t.queueID(b)
	br, err := t.send(ctx, b, skip)
	if err != nil {
		end(pgconn.CommandTag{}, err)
		return errRows{err}, err
	}
	rows, err := br.Query()
	r := &firstRows{Rows: rows, conn: t.conn, close: br.Close, end: end}
	if err != nil {
		r.Close()
		return r, err
	}
	return r, nil
}

// firstQueryRow is firstQuery for one row.
func (t *attemptTx) firstQueryRow(ctx context.Context, sql string, args []any) pgx.Row {
	rows, err := t.firstQuery(ctx, sql, args)
	if err != nil {
		return errRows{err}
	}
	return firstRow{rows.(*firstRows)}
}

// lean returns the connection's statement cache when fn's first statement
// with these arguments goes in one protocol batch (first_lean.go), or nil.
func (t *attemptTx) lean(args []any) *stmtCache {
	st := stateOf(t.pgConn)
	if st == nil || !st.stmts.on {
		return nil
	}
	if len(args) > 0 {
		if _, ok := args[0].(pgx.QueryRewriter); ok {
			return nil
		}
	}
	return &st.stmts
}

// firstSimple runs fn's statement without arguments as pgx's Exec does,
// in the simple protocol (it may hold several statements), in one query
// after BEGIN when it is the first, with the id read after it.
func (t *attemptTx) firstSimple(ctx context.Context, sql string) (tag pgconn.CommandTag, err error) {
	ctx, end := t.traceQuery(ctx, sql, nil)
	defer func() { end(tag, err) }()
	first := !t.begun
	t.begun = true
	// One allocation: the query is built in a buffer on the stack.
	var buf [512]byte
	q := buf[:0]
	skip := 0
	if first {
		q = append(q, beginSQLs[t.a.iso][b2i(t.a.opts.ReadOnly)][b2i(t.a.opts.Deferrable)]...)
		skip = 1
		if ms, ok := t.a.statementTimeout(ctx); ok {
			q = append(q, "; set local statement_timeout = "...)
			q = strconv.AppendInt(q, ms, 10)
			skip = 2
		}
		// The newline ends a line comment fn's statement may end with.
		q = append(q, ";\n"...)
	}
	q = append(q, sql...)
	var c *stmtCache
	if st := stateOf(t.pgConn); st != nil {
		c = &st.stmts
	}
	if t.capture != captureNone {
		q = append(q, "\n;"...)
		if t.capture == captureID && c != nil && c.xidPrepared {
			q = append(q, executeXidSQLs[b2i(t.notify)]...)
		} else {
			q = append(q, idSQLs[t.capture][b2i(t.notify)]...)
		}
	}
	mrr := t.pgConn.Exec(ctx, string(q))
	done, idDone := 0, false
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		fields := rr.FieldDescriptions()
		isID := t.capture != captureNone && len(fields) > 0 && fields[0].Name == "pgtx_xid"
		var xid uint64
		var null, got bool
		var run resolve.Run
		var flushed int64
		for rr.NextRow() {
			if v := rr.Values(); isID && len(v) > 0 {
				got, null = true, v[0] == nil
				xid, _ = resolve.ParseUint(v[0])
				if len(v) == 5 {
					run, flushed = resolve.ParseRun(v[1:])
				}
			}
		}
		ct, rerr := rr.Close()
		if rerr != nil {
			break
		}
		done++
		if done <= skip {
			continue
		}
		idDone = isID && got
		if idDone {
			t.idRead, t.idNull, t.id.Xid = true, null, xid
			if t.capture == captureIDRun {
				t.id.Run, t.id.Flushed = run, flushed
			}
			continue
		}
		tag = ct
	}
	err = mrr.Close()
	if err != nil && c != nil {
		c.invalidate("", err)
	}
	if done < skip {
		t.beginErr = err
		if err == nil {
			t.beginErr = errors.New("pgtx: BEGIN did not run")
		}
		return tag, t.beginErr
	}
	if !idDone && t.idRead {
		// fn's own statement returned the column name: it was not the id.
		t.idRead = false
	}
	return tag, err
}

// traceQuery reports fn's first statement to the connection's QueryTracer
// as pgx reports every statement, and returns the function that reports
// its end.
func (t *attemptTx) traceQuery(ctx context.Context, sql string, args []any) (context.Context, func(pgconn.CommandTag, error)) {
	var tr pgx.QueryTracer
	if st := stateOf(t.pgConn); st != nil {
		tr = st.tracer
	}
	if tr == nil {
		return ctx, func(pgconn.CommandTag, error) {}
	}
	ctx = tr.TraceQueryStart(ctx, t.conn, pgx.TraceQueryStartData{SQL: sql, Args: args})
	return ctx, func(tag pgconn.CommandTag, err error) {
		tr.TraceQueryEnd(ctx, t.conn, pgx.TraceQueryEndData{CommandTag: tag, Err: err})
	}
}

// firstRows are the rows of fn's first query: closing them ends the write
// that carried it (and reads the id after it).
type firstRows struct {
	pgx.Rows
	conn   *pgx.Conn
	close  func() error
	end    func(pgconn.CommandTag, error)
	closed bool
	err    error
}

// Next advances; at the end it ends the write.
func (r *firstRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

// Close closes the rows and ends the write.
func (r *firstRows) Close() {
	r.Rows.Close()
	r.finish()
}

// Err is the rows' error, or the write's.
func (r *firstRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// Conn returns the connection the rows are read from.
func (r *firstRows) Conn() *pgx.Conn { return r.conn }

func (r *firstRows) finish() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	if err := r.close(); err != nil && r.Rows.Err() == nil {
		r.err = err
	}
	r.end(r.Rows.CommandTag(), r.Err())
}

// firstRow is the row of fn's first QueryRow, read as pgx reads one.
type firstRow struct{ rows *firstRows }

// Scan reads the first row into dest, or fails with pgx.ErrNoRows.
func (r firstRow) Scan(dest ...any) error {
	rows := r.rows
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	err := rows.Scan(dest...)
	rows.Close()
	if err != nil {
		return err
	}
	return rows.Err()
}

// closeConn closes conn at once, bounded by destroyWriteTimeout.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), destroyWriteTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}
