package txn

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/errs"
)

// Tx is the pgx.Tx that fn receives: one per attempt. Its statements go
// through its [writer], which sends BEGIN with the first of them. Commit
// and Rollback are refused: the root's Transaction ends the transaction
// itself ([Commit], [Rollback]). Once the attempt has ended ([Tx.End]),
// every method refuses with [pgx.ErrTxClosed]: the connection is back in
// the pool, and a statement sent on it would run in another caller's
// session.
type Tx struct {
	w      writer
	ctx    context.Context // the attempt's: BEGIN sent for Conn and LargeObjects runs on it
	ended  string          // "Commit" or "Rollback" once fn called it
	closed atomic.Bool     // the attempt has ended

	committed func(conn *pgx.Conn) // [Tx.OnCommitted]
}

// Tx is fn's pgx.Tx.
var _ pgx.Tx = (*Tx)(nil)

// Start readies t for an attempt on conn, in a pool with settings s:
// beginSQL is the call's BEGIN statement and timeout its
// Options.StatementTimeout. ctx is the attempt's. t is reused from a
// previous attempt as new: nothing of that one is kept.
func (t *Tx) Start(ctx context.Context, conn *pgx.Conn, s *Settings, beginSQL string, timeout time.Duration) {
	*t = Tx{ctx: ctx}
	t.w.start(conn, s, beginSQL, timeout)
}

// End ends the attempt: every method of t refuses from now on.
func (t *Tx) End() { t.closed.Store(true) }

// Commit ends t's transaction with COMMIT, on a context the caller's
// cancellation cannot interrupt (an interrupted COMMIT has an unknown
// outcome), bounded by CommitTimeout (a deadline on the socket: when it
// passes, the read fails and pgx closes the connection), and resolves an
// answer that was lost, after giving the dead connection back with r (nil:
// none), whose slot the resolution's wait must not hold. (t's
// own Commit method is fn's, which refuses.)
func Commit(ctx context.Context, t *Tx, r Releaser) (classify.Class, error) {
	return t.w.commit(ctx, r)
}

// Rollback ends t's transaction when it is open, on a context the
// caller's cancellation cannot interrupt, bounded by RollbackTimeout. A
// connection left in a transaction (the ROLLBACK failed, rows were still
// open) is discarded by Release. (t's own Rollback method is fn's, which
// refuses.)
func Rollback(ctx context.Context, t *Tx) { t.w.rollback(ctx) }

// Begun reports that BEGIN was sent.
func (t *Tx) Begun() bool { return t.w.begun() }

// BeginErr returns BEGIN's error: the attempt's failure, whatever fn made
// of it.
func (t *Tx) BeginErr() error { return t.w.beginError() }

// Begin starts a pseudo nested transaction (a savepoint), after BEGIN.
func (t *Tx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.use(ctx); err != nil {
		return nil, err
	}
	sp, err := t.w.pgxTx(ctx).Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &savepoint{Tx: sp, t: t}, nil
}

// Commit refuses to commit: Transaction commits when fn returns nil.
func (t *Tx) Commit(context.Context) error { return t.refuse("Commit") }

// Rollback refuses to roll back: Transaction rolls back when fn returns an
// error.
func (t *Tx) Rollback(context.Context) error { return t.refuse("Rollback") }

// CopyFrom runs COPY FROM after BEGIN (a copy cannot share its write).
func (t *Tx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if t.closed.Load() {
		return 0, pgx.ErrTxClosed
	}
	return t.w.copyFrom(ctx, table, columns, src)
}

// SendBatch sends b; the first statement of the attempt carries BEGIN.
func (t *Tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.closed.Load() {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	return t.w.sendBatch(ctx, b)
}

// LargeObjects returns the large objects of the transaction, after BEGIN.
func (t *Tx) LargeObjects() pgx.LargeObjects {
	if t.closed.Load() {
		return closedTx().LargeObjects()
	}
	t.w.handOut(t.ctx)
	return t.w.pgxTx(t.ctx).LargeObjects()
}

// Prepare prepares a statement, after BEGIN.
func (t *Tx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if t.closed.Load() {
		return nil, pgx.ErrTxClosed
	}
	return t.w.prepare(ctx, name, sql)
}

// Exec runs a statement; the first of the attempt carries BEGIN.
func (t *Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.closed.Load() {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return t.w.exec(ctx, sql, args)
}

// Query runs a query; the first statement of the attempt carries BEGIN.
func (t *Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.closed.Load() {
		return errs.NewRows(pgx.ErrTxClosed), pgx.ErrTxClosed
	}
	return t.w.query(ctx, sql, args)
}

// QueryRow runs a query for one row; the first statement of the attempt
// carries BEGIN.
func (t *Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.closed.Load() {
		return errs.NewRows(pgx.ErrTxClosed)
	}
	return t.w.queryRow(ctx, sql, args)
}

// Conn returns the connection, inside the transaction (BEGIN is sent
// first), or nil once the attempt has ended. What runs on it is not seen by
// pgtx: the transaction's id is read again at COMMIT, assigning one.
func (t *Tx) Conn() *pgx.Conn {
	if t.closed.Load() {
		return nil
	}
	return t.w.handOut(t.ctx)
}

// use refuses a closed attempt's method and sends BEGIN first when it has
// not been sent.
func (t *Tx) use(ctx context.Context) error {
	if t.closed.Load() {
		return pgx.ErrTxClosed
	}
	return t.w.alone(ctx)
}

// closedTx returns a pgx transaction that is closed: every method of its
// large objects fails with pgx.ErrTxClosed.
func closedTx() pgx.Tx {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	return pgx.FailedBatchResults(b, pgx.ErrTxClosed).Tx()
}

// sentAfterBegin reports a statement that goes after BEGIN instead of with
// it: one with a per-query option, or one that may be the name of a
// statement prepared on the connection.
func sentAfterBegin(sql string, args []any) bool { return hasQueryOption(args) || mayBeName(sql) }

// mayBeName reports that sql may be the name of a statement the caller
// prepared on the connection (in AfterConnect, say), which pgx runs by its
// name: one word, without white space or a semicolon. As SQL, one word is
// only a command such as CHECKPOINT, which loses nothing by going after
// BEGIN. A name with white space in it is taken for SQL.
func mayBeName(sql string) bool {
	if sql == "" {
		return false
	}
	for i := 0; i < len(sql); i++ {
		switch sql[i] {
		case ' ', '\t', '\n', '\r', '\f', '\v', ';':
			return false
		}
	}
	return true
}

// hasQueryOption reports arguments that start with one of pgx's per-query
// options a batch does not take (an exec mode, result formats): such a
// first statement is sent after BEGIN instead of with it.
func hasQueryOption(args []any) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0].(type) {
	case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
		return true
	}
	return false
}
