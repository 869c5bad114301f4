package txn

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/pgtx-go/pgtx/internal/cancel"
	"github.com/pgtx-go/pgtx/internal/connstate"
	"github.com/pgtx-go/pgtx/internal/errs"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// BEGIN travels with fn's first statement, in one write, as pgx's
// Batch.BeginTx sends it: BEGIN, the transaction's statement_timeout when
// it has one, fn's statement, and, in a resolving pool, the read of the
// transaction's id, without assigning one. The statements after it carry
// the read too, until the transaction has an id (tracking): its id is known
// before COMMIT is sent, and a write-free transaction takes none. The
// statements go in the connection's own exec mode, so pgx's statement
// cache prepares pgtx's statements once per connection, and behind a
// transaction-mode pooler (QueryExecModeExec, QueryExecModeSimpleProtocol)
// they go unnamed or simple.

// The id reads: NULL for a transaction without an id, which they do not
// give one; the forcing ones give it one (a notification's). With the id
// they read [resolve.ID].LSN: once the transaction has an id, they write a
// WAL record under it, an empty transactional logical message with prefix
// "pgtx" (the least WAL a plain role can write), and read its end, so that
// even a transaction whose writes are not logged (temporary and unlogged
// tables, a notification) has a record before its commit record. Where the
// role may not write it ([resolve.Conn].Emit), they read NULL instead.
// Its column is named with one letter, a name pgconn turns into a string
// without allocating.
const (
	idSQL          = "select pg_current_xact_id_if_assigned()::text::int8 as pgtx_xid, "
	idForcedSQL    = "select pg_current_xact_id()::text::int8 as pgtx_xid, "
	lsnSQL         = "(case when pg_current_xact_id_if_assigned() is not null then pg_logical_emit_message(true, 'pgtx', '') - '0/0'::pg_lsn end)::int8 as l"
	lsnForcedSQL   = "(pg_logical_emit_message(true, 'pgtx', '') - '0/0'::pg_lsn)::int8 as l"
	noLSNSQL       = "null::int8 as l"
	runSQL         = ", " + resolve.RunSQL
	idLSNSQL       = idSQL + lsnSQL
	idLSNForcedSQL = idForcedSQL + lsnForcedSQL
)

// idSQLs indexes the id reads by whether they write the record (emit),
// capture and forcing.
var idSQLs = [2][3][2]string{
	{captureID: {idSQL + noLSNSQL, idForcedSQL + noLSNSQL}, captureIDRun: {idSQL + noLSNSQL + runSQL, idForcedSQL + noLSNSQL + runSQL}},
	{captureID: {idLSNSQL, idLSNForcedSQL}, captureIDRun: {idLSNSQL + runSQL, idLSNForcedSQL + runSQL}},
}

// idReadSQL is the statement that reads t's id.
func (t *Tx) idReadSQL() string { return idSQLs[b2i(t.emit)][t.capture][b2i(t.notify)] }

// setTimeoutSQL sets the transaction's statement_timeout ($1, in
// milliseconds) as SET LOCAL would, with a parameter, so that it is
// prepared once whatever the value.
const setTimeoutSQL = "select set_config('statement_timeout', $1, true)"

// beginBatch returns a batch that begins the transaction, with its
// statement_timeout, and reports how many results of it are BEGIN's.
func (t *Tx) beginBatch(ctx context.Context, n int) (*pgx.Batch, int) {
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, n+3)}
	if t.begun {
		return b, 0 // a later write, which reads the id only
	}
	b.BeginTx(pgx.TxOptions{BeginQuery: t.beginSQL})
	if ms, ok := statementTimeout(ctx, t.timeout, t.s.SessionTimeout); ok {
		b.Queue(setTimeoutSQL, strconv.FormatInt(ms, 10))
		return b, 2
	}
	return b, 1
}

// queueID queues the read of the id after fn's statements.
func (t *Tx) queueID(b *pgx.Batch) {
	if t.capture == captureNone {
		return
	}
	b.Queue(t.idReadSQL()).QueryRow(t.scanID)
}

// scanID reads the id and, behind a pooler, the server's run.
func (t *Tx) scanID(row pgx.Row) error {
	var xid, lsn pgtype.Int8
	var err error
	if t.capture == captureIDRun {
		err = row.Scan(&xid, &lsn, &t.id.Run.Timeline, &t.id.Run.Start, &t.id.Run.Epoch, &t.id.Flushed)
	} else {
		err = row.Scan(&xid, &lsn)
	}
	if err != nil {
		return err
	}
	t.idRead, t.idNull = true, !xid.Valid
	t.id.Xid, t.id.LSN = uint64(xid.Int64), lsn.Int64
	return nil
}

// send sends b, which begins the transaction with its first skip results,
// and reads those. BEGIN's failure is the attempt's (beginErr).
func (t *Tx) send(ctx context.Context, b *pgx.Batch, skip int) (pgx.BatchResults, error) {
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
func (t *Tx) beginNow(ctx context.Context) error {
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

// closeConn closes conn at once, bounded by destroyWriteTimeout.
func closeConn(conn *pgx.Conn) {
	ctx, stop := context.WithTimeout(context.Background(), cancel.DestroyWriteTimeout)
	defer stop()
	_ = conn.Close(ctx)
}

// firstBatch sends fn's batch b after BEGIN, and the id read after it.
func (t *Tx) firstBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
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
func (t *Tx) firstExec(ctx context.Context, sql string, args []any) (tag pgconn.CommandTag, err error) {
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
func (t *Tx) firstQuery(ctx context.Context, sql string, args []any) (pgx.Rows, error) {
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
		return errs.NewRows(err), err
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
func (t *Tx) firstQueryRow(ctx context.Context, sql string, args []any) pgx.Row {
	rows, err := t.firstQuery(ctx, sql, args)
	if err != nil {
		return errs.NewRows(err)
	}
	return firstRow{rows.(*firstRows)}
}

// lean returns the connection's statement cache when fn's first statement
// with these arguments goes in one protocol batch (first_lean.go), or nil.
func (t *Tx) lean(args []any) *connstate.Stmts {
	st := t.st
	if st == nil || !st.Stmts.On {
		return nil
	}
	if len(args) > 0 {
		if _, ok := args[0].(pgx.QueryRewriter); ok {
			return nil
		}
	}
	return &st.Stmts
}
