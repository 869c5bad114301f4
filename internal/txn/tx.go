package txn

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/connstate"
	"github.com/pgtx-go/pgtx/internal/errs"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// Tx is the pgx.Tx that fn receives: one per attempt. BEGIN is not
// sent until fn sends its first statement, and then in the same write
// (first_write.go); a fn that sends nothing sends nothing. Commit and
// Rollback are refused: the root's Transaction ends the transaction itself
// ([Commit], [Rollback]). Once the attempt has ended ([Tx.End]), every
// method refuses with [pgx.ErrTxClosed]: the connection is back in the
// pool, and a statement sent on it would run in another caller's session.
type Tx struct {
	s      *Settings
	conn   *pgx.Conn
	pgConn *pgconn.PgConn
	st     *connstate.State // the connection's; nil for one not of a pgtx pool
	ctx    context.Context  // the attempt's: BEGIN sent for Conn and LargeObjects runs on it

	// beginSQL is the BEGIN statement of the call's isolation level and
	// flags; timeout is the call's statement_timeout (> 0), none (< 0) or
	// the session's (0).
	beginSQL string
	timeout  time.Duration

	// beginErr is BEGIN's error, the attempt's failure whatever fn does
	// with it. ptx is pgx's transaction, for savepoints and large objects
	// (pgxTx).
	beginErr error
	ptx      pgx.Tx

	// The transaction's id, when the first write read it (idRead; 0 with
	// idNull when it had none then).
	id resolve.ID

	ended string // "Commit" or "Rollback" once fn called it

	// The small fields together, packed in one word: the first attempt's
	// handle is part of every call's allocation.
	kind    Kind    // what the transaction can be resolved with
	capture capture // what the first write reads for a resolution
	emit    bool    // the id read writes the record of [resolve.ID].LSN
	begun   bool    // BEGIN was sent
	// idRead, idNull: above; stale: anything sent since the id was read
	// may have given it one; notify: a notification may have been sent,
	// which takes its id only at COMMIT.
	idRead bool
	idNull bool
	stale  bool
	notify bool
	closed atomic.Bool // the attempt has ended
}

// Tx is fn's pgx.Tx.
var _ pgx.Tx = (*Tx)(nil)

// Start readies t for an attempt on conn, in a pool with settings s:
// beginSQL is the call's BEGIN statement and timeout its
// Options.StatementTimeout. ctx is the attempt's. t is reused from a
// previous attempt as new: nothing of that one is kept.
func (t *Tx) Start(ctx context.Context, conn *pgx.Conn, s *Settings, beginSQL string, timeout time.Duration) {
	pgConn := conn.PgConn()
	st := connstate.Of(pgConn)
	kind, capture := kindOn(s.Resolving, pgConn, st)
	*t = Tx{s: s, conn: conn, pgConn: pgConn, st: st, ctx: ctx, kind: kind, capture: capture, beginSQL: beginSQL, timeout: timeout}
	if capture != captureNone {
		// The server's run as captured before the connection's first
		// transaction ([SetUp]): a direct connection's lives as long as
		// its backend (behind a pooler the id read captures it again).
		t.id = resolve.ID{System: st.Res.System, Run: st.Res.Run, Flushed: st.Res.Flushed}
		t.emit = st.Res.Emit
	}
}

// End ends the attempt: every method of t refuses from now on.
func (t *Tx) End() { t.closed.Store(true) }

// Begun reports that BEGIN was sent.
func (t *Tx) Begun() bool { return t.begun }

// BeginErr returns BEGIN's error: the attempt's failure, whatever fn made
// of it.
func (t *Tx) BeginErr() error { return t.beginErr }

// Begin starts a pseudo nested transaction (a savepoint), after BEGIN.
func (t *Tx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.use(ctx); err != nil {
		return nil, err
	}
	sp, err := t.pgxTx(ctx).Begin(ctx)
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
	if err := t.use(ctx); err != nil {
		return 0, err
	}
	return t.conn.CopyFrom(ctx, table, columns, src)
}

// SendBatch sends b; the first statement of the attempt carries BEGIN.
func (t *Tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.closed.Load() {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	for _, qq := range b.QueuedQueries {
		t.scan(qq.SQL)
	}
	if (!t.begun || t.tracking()) && len(b.QueuedQueries) > 0 {
		if !slices.ContainsFunc(b.QueuedQueries, func(qq *pgx.QueuedQuery) bool { return mayBeName(qq.SQL) }) {
			return t.firstBatch(ctx, b)
		}
		if err := t.beginNow(ctx); err != nil {
			return pgx.FailedBatchResults(b, err)
		}
	}
	if t.begun {
		t.after()
	}
	return t.conn.SendBatch(ctx, b) // empty before BEGIN: sends nothing
}

// LargeObjects returns the large objects of the transaction, after BEGIN.
func (t *Tx) LargeObjects() pgx.LargeObjects {
	if t.closed.Load() {
		return closedTx().LargeObjects()
	}
	if !t.begun {
		_ = t.beginNow(t.ctx) // its error is the attempt's
	}
	t.notify, t.stale = true, true // statements pgtx does not see
	return t.pgxTx(t.ctx).LargeObjects()
}

// Prepare prepares a statement, after BEGIN.
func (t *Tx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	t.scan(sql)
	if err := t.use(ctx); err != nil {
		return nil, err
	}
	return t.conn.Prepare(ctx, name, sql)
}

// Exec runs a statement; the first of the attempt carries BEGIN.
func (t *Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.closed.Load() {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	t.scan(sql)
	if !t.begun || t.tracking() {
		switch {
		case sentAfterBegin(sql, args):
		case len(args) == 0:
			return t.firstSimple(ctx, sql)
		default:
			return t.firstExec(ctx, sql, args)
		}
		if err := t.beginNow(ctx); err != nil {
			return pgconn.CommandTag{}, err
		}
	}
	t.after()
	return t.conn.Exec(ctx, sql, args...)
}

// Query runs a query; the first statement of the attempt carries BEGIN.
func (t *Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.closed.Load() {
		return errs.NewRows(pgx.ErrTxClosed), pgx.ErrTxClosed
	}
	t.scan(sql)
	if !t.begun || t.tracking() {
		if !sentAfterBegin(sql, args) {
			return t.firstQuery(ctx, sql, args)
		}
		if err := t.beginNow(ctx); err != nil {
			return errs.NewRows(err), err
		}
	}
	t.after()
	return t.conn.Query(ctx, sql, args...)
}

// QueryRow runs a query for one row; the first statement of the attempt
// carries BEGIN.
func (t *Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.closed.Load() {
		return errs.NewRows(pgx.ErrTxClosed)
	}
	t.scan(sql)
	if !t.begun || t.tracking() {
		if !sentAfterBegin(sql, args) {
			return t.firstQueryRow(ctx, sql, args)
		}
		if err := t.beginNow(ctx); err != nil {
			return errs.NewRows(err)
		}
	}
	t.after()
	return t.conn.QueryRow(ctx, sql, args...)
}

// Conn returns the connection, inside the transaction (BEGIN is sent
// first), or nil once the attempt has ended. What runs on it is not seen by
// pgtx: the transaction's id is read again at COMMIT, assigning one.
func (t *Tx) Conn() *pgx.Conn {
	if t.closed.Load() {
		return nil
	}
	if !t.begun {
		_ = t.beginNow(t.ctx) // its error is the attempt's
	}
	t.notify, t.stale = true, true
	return t.conn
}

// use refuses a closed attempt's method and sends BEGIN first when it has
// not been sent.
func (t *Tx) use(ctx context.Context) error {
	if t.closed.Load() {
		return pgx.ErrTxClosed
	}
	if !t.begun {
		return t.beginNow(ctx)
	}
	t.after()
	return nil
}

// pgxTx returns pgx's transaction, for what only pgx's can do (savepoints,
// large objects). After a first statement sent in the simple protocol
// there is none yet: one is made with a statement that does nothing.
func (t *Tx) pgxTx(ctx context.Context) pgx.Tx {
	if t.ptx == nil {
		b := &pgx.Batch{}
		b.BeginTx(pgx.TxOptions{BeginQuery: "select"})
		br := t.conn.SendBatch(ctx, b)
		t.ptx = br.(interface{ Tx() pgx.Tx }).Tx()
		_ = br.Close()
	}
	return t.ptx
}

// closedTx returns a pgx transaction that is closed: every method of its
// large objects fails with pgx.ErrTxClosed.
func closedTx() pgx.Tx {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	return pgx.FailedBatchResults(b, pgx.ErrTxClosed).Tx()
}

// tracking reports that the statements fn sends still read the id after
// them: every statement so far did, and the transaction has none yet. The
// read costs no round trip (it goes in the statement's write), and makes
// the id known before COMMIT is sent from the statement that gives it one.
func (t *Tx) tracking() bool {
	return t.capture != captureNone && t.idRead && t.idNull && !t.stale && !t.notify
}

// after records a statement sent after the first write: it may give the
// transaction an id the first write did not see.
func (t *Tx) after() {
	if !t.idRead || t.idNull {
		t.stale = true
	}
}

// scan notes a statement that may send a notification (NOTIFY, pg_notify):
// such a transaction takes its id only at COMMIT, so COMMIT's write reads
// it with one assigned. The test is on the text, so a notification sent by
// a function whose name does not say so is not seen.
func (t *Tx) scan(sql string) {
	if !t.notify && containsFold(sql, "notify") {
		t.notify = true
	}
}

// containsFold reports whether s contains the lower-case ASCII word w,
// ignoring ASCII case, without allocating.
func containsFold(s, w string) bool {
	for i := 0; i+len(w) <= len(s); i++ {
		j := 0
		for ; j < len(w); j++ {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != w[j] {
				break
			}
		}
		if j == len(w) {
			return true
		}
	}
	return false
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
