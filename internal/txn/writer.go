package txn

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/cancel"
	"github.com/pgtx-go/pgtx/internal/connstate"
	"github.com/pgtx-go/pgtx/internal/errs"
)

// writer sends fn's statements on the attempt's connection: BEGIN (with
// the transaction's statement_timeout) in the same write as the first
// statement, as pgx's Batch.BeginTx sends it, and, in a resolving pool,
// the read of the transaction's id after each statement until it has one
// ([idTracker]). A fn that sends nothing sends nothing. The statements go
// in the connection's own exec mode, so that behind a transaction-mode
// pooler (QueryExecModeExec, QueryExecModeSimpleProtocol) they go unnamed
// or simple.
type writer struct {
	s      *Settings
	conn   *pgx.Conn
	pgConn *pgconn.PgConn
	st     *connstate.State // the connection's; nil for one not of a pgtx pool

	// beginSQL is the BEGIN statement of the call's isolation level and
	// flags; timeout is the call's statement_timeout (> 0), none (< 0) or
	// the session's (0).
	beginSQL string
	timeout  time.Duration

	// beginSent says BEGIN was sent; beginErr is its error, the attempt's
	// failure whatever fn does with it. ptx is pgx's transaction, for
	// savepoints and large objects (pgxTx).
	beginSent bool
	beginErr  error
	ptx       pgx.Tx

	// pgpool: the connection goes through Pgpool-II, where BEGIN goes
	// first, alone ([writer.beginPgpool]); balanced: the transaction is
	// read-only and Pgpool-II may answer it from a standby.
	pgpool, balanced bool

	track idTracker

	// deferred are fn's statements not sent yet ([Tx.Defer]); deferErr is
	// the error one of them met, the attempt's failure.
	deferred []*deferred
	deferErr error
}

// start readies w for an attempt on conn, in a pool with settings s.
func (w *writer) start(conn *pgx.Conn, s *Settings, beginSQL string, timeout time.Duration) {
	pgConn := conn.PgConn()
	st := connstate.Of(pgConn)
	w.s, w.conn, w.pgConn, w.st, w.beginSQL, w.timeout = s, conn, pgConn, st, beginSQL, timeout
	w.pgpool = st != nil && st.Pgpool
	w.balanced = w.pgpool && !st.PinReadOnly && readOnly(beginSQL)
	w.track.start(s.Resolving, pgConn, st, w.balanced)
}

// begun reports that BEGIN was sent.
func (w *writer) begun() bool { return w.beginSent }

// beginError returns BEGIN's error.
func (w *writer) beginError() error { return w.beginErr }

// exec runs fn's statement: the first one with BEGIN, a tracked one with
// the id read.
func (w *writer) exec(ctx context.Context, sql string, args []any) (pgconn.CommandTag, error) {
	w.track.scan(sql)
	if err := w.beginFirst(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	if !w.beginSent || w.track.tracking() || w.pending() {
		switch {
		case sentAfterBegin(sql, args):
			if err := w.flushDeferred(ctx); err != nil {
				return pgconn.CommandTag{}, err
			}
		case len(args) == 0 && !w.pending():
			return w.firstSimple(ctx, sql)
		default:
			return w.firstExec(ctx, sql, args)
		}
		if err := w.beginNow(ctx); err != nil {
			return pgconn.CommandTag{}, err
		}
	}
	w.track.after()
	return w.conn.Exec(ctx, sql, args...)
}

// query runs fn's query: the first one with BEGIN, a tracked one with the
// id read.
func (w *writer) query(ctx context.Context, sql string, args []any) (pgx.Rows, error) {
	w.track.scan(sql)
	if err := w.beginFirst(ctx); err != nil {
		return errs.NewRows(err), err
	}
	if !w.beginSent || w.track.tracking() || w.pending() {
		if !sentAfterBegin(sql, args) {
			return w.firstQuery(ctx, sql, args)
		}
		if err := w.flushDeferred(ctx); err != nil {
			return errs.NewRows(err), err
		}
		if err := w.beginNow(ctx); err != nil {
			return errs.NewRows(err), err
		}
	}
	w.track.after()
	return w.conn.Query(ctx, sql, args...)
}

// queryRow is query for one row.
func (w *writer) queryRow(ctx context.Context, sql string, args []any) pgx.Row {
	w.track.scan(sql)
	if err := w.beginFirst(ctx); err != nil {
		return errs.NewRows(err)
	}
	if !w.beginSent || w.track.tracking() || w.pending() {
		if !sentAfterBegin(sql, args) {
			return w.firstQueryRow(ctx, sql, args)
		}
		if err := w.flushDeferred(ctx); err != nil {
			return errs.NewRows(err)
		}
		if err := w.beginNow(ctx); err != nil {
			return errs.NewRows(err)
		}
	}
	w.track.after()
	return w.conn.QueryRow(ctx, sql, args...)
}

// sendBatch sends fn's batch b: the first one with BEGIN, a tracked one
// with the id read.
func (w *writer) sendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	w.scanBatch(b)
	if len(b.QueuedQueries) > 0 {
		if err := w.beginFirst(ctx); err != nil {
			return pgx.FailedBatchResults(b, err)
		}
	}
	if (!w.beginSent || w.track.tracking() || w.pending()) && len(b.QueuedQueries) > 0 {
		if !slices.ContainsFunc(b.QueuedQueries, func(qq *pgx.QueuedQuery) bool { return mayBeName(qq.SQL) }) {
			return w.firstBatch(ctx, b)
		}
		if err := w.flushDeferred(ctx); err != nil {
			return pgx.FailedBatchResults(b, err)
		}
		if err := w.beginNow(ctx); err != nil {
			return pgx.FailedBatchResults(b, err)
		}
	}
	if w.beginSent {
		w.track.after()
	}
	return w.conn.SendBatch(ctx, b) // empty before BEGIN: sends nothing
}

// scanBatch notes the statements of b that may send a notification.
func (w *writer) scanBatch(b *pgx.Batch) {
	for _, qq := range b.QueuedQueries {
		w.track.scan(qq.SQL)
	}
}

// alone readies the connection for a statement that cannot share BEGIN's
// write (a copy, a savepoint, a prepare): BEGIN goes alone first.
func (w *writer) alone(ctx context.Context) error {
	if err := w.flushDeferred(ctx); err != nil {
		return err
	}
	if !w.beginSent {
		return w.beginNow(ctx)
	}
	w.track.after()
	return nil
}

// copyFrom runs COPY FROM after BEGIN (a copy cannot share its write).
func (w *writer) copyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := w.alone(ctx); err != nil {
		return 0, err
	}
	return w.conn.CopyFrom(ctx, table, columns, src)
}

// prepare prepares a statement, after BEGIN.
func (w *writer) prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	w.track.scan(sql)
	if err := w.alone(ctx); err != nil {
		return nil, err
	}
	return w.conn.Prepare(ctx, name, sql)
}

// inSavepoint notes sql, a statement sent in a savepoint (after BEGIN,
// without the id read), after sending the deferred statements.
func (w *writer) inSavepoint(ctx context.Context, sql string) error {
	if err := w.flushDeferred(ctx); err != nil {
		return err
	}
	w.track.scan(sql)
	w.track.after()
	return nil
}

// handOut readies the connection for fn's own use (Conn, LargeObjects),
// whose statements pgtx does not see, and returns it: BEGIN goes first,
// its error the attempt's.
func (w *writer) handOut(ctx context.Context) *pgx.Conn {
	_ = w.flushDeferred(ctx) // its error is the attempt's (deferErr)
	if !w.beginSent {
		_ = w.beginNow(ctx)
	}
	w.track.handedOut()
	return w.conn
}

// pgxTx returns pgx's transaction, for what only pgx's can do (savepoints,
// large objects). After a first statement sent in the simple protocol
// there is none yet: one is made with a statement that does nothing.
func (w *writer) pgxTx(ctx context.Context) pgx.Tx {
	if w.ptx == nil {
		b := &pgx.Batch{}
		b.BeginTx(pgx.TxOptions{BeginQuery: "select"})
		br := w.conn.SendBatch(ctx, b)
		w.ptx = br.(interface{ Tx() pgx.Tx }).Tx()
		_ = br.Close()
	}
	return w.ptx
}

// setTimeoutSQL sets the transaction's statement_timeout ($1, in
// milliseconds) as SET LOCAL would, with a parameter, so that it is
// prepared once whatever the value.
const setTimeoutSQL = "select set_config('statement_timeout', $1, true)"

// beginBatch returns a batch that begins the transaction, with its
// statement_timeout, and reports how many results of it are BEGIN's.
func (w *writer) beginBatch(ctx context.Context, n int) (*pgx.Batch, int) {
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, n+3)}
	if w.beginSent {
		return b, 0 // a later write, which reads the id only
	}
	b.BeginTx(pgx.TxOptions{BeginQuery: w.beginSQL})
	if ms, ok := statementTimeout(ctx, w.timeout, w.s.SessionTimeout); ok {
		b.Queue(setTimeoutSQL, strconv.FormatInt(ms, 10))
		return b, 2
	}
	return b, 1
}

// send sends b, which begins the transaction with its first skip results,
// and the deferred statements ds after them, and reads those. BEGIN's
// failure is the attempt's (beginErr), and so is a deferred statement's
// (deferErr).
func (w *writer) send(ctx context.Context, b *pgx.Batch, skip int, ds []*deferred) (pgx.BatchResults, error) {
	w.beginSent = true
	ends := w.traceDeferred(ctx, ds)
	br := w.conn.SendBatch(ctx, b)
	if skip > 0 {
		w.ptx = br.Tx()
	}
	var err error
	for range skip {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if err != nil {
		w.beginErr = err
		_ = br.Close()
		for _, end := range ends {
			end(pgconn.CommandTag{}, errNotRun)
		}
		return nil, err
	}
	if len(ds) > 0 {
		if err := w.readDeferred(br, ds, ends); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	return br, nil
}

// beginNow sends BEGIN alone, for what cannot share its write (a copy, a
// savepoint, a prepare, the connection handed out). A failed BEGIN closes
// the connection: what fn sends on it must never run outside the
// transaction.
func (w *writer) beginNow(ctx context.Context) error {
	w.track.sentAlone()
	if w.beginSent {
		return nil
	}
	var err error
	if w.pgpool {
		err = w.beginPgpool(ctx)
	} else {
		b, skip := w.beginBatch(ctx, 0)
		var br pgx.BatchResults
		if br, err = w.send(ctx, b, skip, nil); err == nil {
			if err = br.Close(); err != nil {
				w.beginErr = err
			}
		}
	}
	if err != nil {
		closeConn(w.conn)
	}
	return err
}

// beginFirst sends BEGIN alone before fn's first statement behind
// Pgpool-II ([writer.beginPgpool]); elsewhere BEGIN goes with it.
func (w *writer) beginFirst(ctx context.Context) error {
	if !w.pgpool || w.beginSent {
		return nil
	}
	return w.beginNow(ctx)
}

// closeConn closes conn at once, bounded by destroyWriteTimeout.
func closeConn(conn *pgx.Conn) {
	ctx, stop := context.WithTimeout(context.Background(), cancel.DestroyWriteTimeout)
	defer stop()
	_ = conn.Close(ctx)
}

// firstBatch sends fn's batch b after BEGIN, and the id read after it.
func (w *writer) firstBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	nb, skip := w.beginBatch(ctx, len(b.QueuedQueries)+len(w.deferred))
	ds := w.queueDeferred(nb)
	nb.QueuedQueries = append(nb.QueuedQueries, b.QueuedQueries...)
	w.queueID(nb)
	br, err := w.send(ctx, nb, skip, ds)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return br
}

// firstExec runs fn's first statement, with arguments, after BEGIN.
func (w *writer) firstExec(ctx context.Context, sql string, args []any) (tag pgconn.CommandTag, err error) {
	ctx, end := w.traceQuery(ctx, sql, args)
	defer func() { end(tag, err) }()
	b, skip := w.beginBatch(ctx, 1+len(w.deferred))
	ds := w.queueDeferred(b)
	b.Queue(sql, args...)
	w.queueID(b)
	br, err := w.send(ctx, b, skip, ds)
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
func (w *writer) firstQuery(ctx context.Context, sql string, args []any) (pgx.Rows, error) {
	ctx, end := w.traceQuery(ctx, sql, args)
	b, skip := w.beginBatch(ctx, 1+len(w.deferred))
	ds := w.queueDeferred(b)
	b.Queue(sql, args...)
	w.queueID(b)
	br, err := w.send(ctx, b, skip, ds)
	if err != nil {
		end(pgconn.CommandTag{}, err)
		return errs.NewRows(err), err
	}
	rows, err := br.Query()
	r := &firstRows{Rows: rows, conn: w.conn, close: br.Close, end: end}
	if err != nil {
		r.Close()
		return r, err
	}
	return r, nil
}

// firstQueryRow is firstQuery for one row.
func (w *writer) firstQueryRow(ctx context.Context, sql string, args []any) pgx.Row {
	rows, err := w.firstQuery(ctx, sql, args)
	if err != nil {
		return errs.NewRows(err)
	}
	return firstRow{rows.(*firstRows)}
}

// queueID queues the read of the id after fn's statements, in the
// transaction's first write and while it is tracked.
func (w *writer) queueID(b *pgx.Batch) {
	if !w.track.reads() || w.beginSent && !w.track.tracking() {
		return
	}
	b.Queue(w.track.readSQL()).QueryRow(w.track.scanRow)
}

// traceQuery reports fn's first statement to the connection's QueryTracer
// as pgx reports every statement, and returns the function that reports
// its end.
func (w *writer) traceQuery(ctx context.Context, sql string, args []any) (context.Context, func(pgconn.CommandTag, error)) {
	var tr pgx.QueryTracer
	if w.st != nil {
		tr = w.st.Tracer
	}
	if tr == nil {
		return ctx, func(pgconn.CommandTag, error) {}
	}
	ctx = tr.TraceQueryStart(ctx, w.conn, pgx.TraceQueryStartData{SQL: sql, Args: args})
	return ctx, func(tag pgconn.CommandTag, err error) {
		tr.TraceQueryEnd(ctx, w.conn, pgx.TraceQueryEndData{CommandTag: tag, Err: err})
	}
}
