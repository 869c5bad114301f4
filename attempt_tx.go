package pgtx

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// attemptTx is the pgx.Tx that fn receives: one per attempt. BEGIN is not
// sent until fn sends its first statement, and then in the same write
// (first_write.go); a fn that sends nothing sends nothing. Commit and
// Rollback are refused: Transaction ends the transaction itself. Once the
// attempt has ended, every method refuses with [pgx.ErrTxClosed]: the
// connection is back in the pool, and a statement sent on it would run in
// another caller's session.
type attemptTx struct {
	a       *txAttempt
	conn    *pgx.Conn
	pgConn  *pgconn.PgConn
	ctx     context.Context // the attempt's: BEGIN sent for Conn and LargeObjects runs on it
	capture capture         // what the first write reads for a resolution

	// begun: BEGIN was sent; beginErr is its error, the attempt's failure
	// whatever fn does with it. ptx is pgx's transaction, for savepoints
	// and large objects (pgxTx).
	begun    bool
	beginErr error
	ptx      pgx.Tx

	// The transaction's id, when the first write read it (idRead; 0 with
	// idNull when it had none then), and whether anything sent since may
	// have given it one (stale), or sent a notification, which takes its
	// id only at COMMIT (notify).
	id     resolve.ID
	idRead bool
	idNull bool
	stale  bool
	notify bool

	ended  string      // "Commit" or "Rollback" once fn called it
	closed atomic.Bool // the attempt has ended
}

// Begin starts a pseudo nested transaction (a savepoint), after BEGIN.
func (t *attemptTx) Begin(ctx context.Context) (pgx.Tx, error) {
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
func (t *attemptTx) Commit(context.Context) error { return t.refuse("Commit") }

// Rollback refuses to roll back: Transaction rolls back when fn returns an
// error.
func (t *attemptTx) Rollback(context.Context) error { return t.refuse("Rollback") }

// CopyFrom runs COPY FROM after BEGIN (a copy cannot share its write).
func (t *attemptTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.use(ctx); err != nil {
		return 0, err
	}
	return t.conn.CopyFrom(ctx, table, columns, src)
}

// SendBatch sends b; the first statement of the attempt carries BEGIN.
func (t *attemptTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.closed.Load() {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	for _, qq := range b.QueuedQueries {
		t.scan(qq.SQL)
	}
	if (!t.begun || t.tracking()) && len(b.QueuedQueries) > 0 {
		return t.firstBatch(ctx, b)
	}
	if t.begun {
		t.after()
	}
	return t.conn.SendBatch(ctx, b) // empty before BEGIN: sends nothing
}

// LargeObjects returns the large objects of the transaction, after BEGIN.
func (t *attemptTx) LargeObjects() pgx.LargeObjects {
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
func (t *attemptTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	t.scan(sql)
	if err := t.use(ctx); err != nil {
		return nil, err
	}
	return t.conn.Prepare(ctx, name, sql)
}

// Exec runs a statement; the first of the attempt carries BEGIN.
func (t *attemptTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.closed.Load() {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	t.scan(sql)
	if !t.begun || t.tracking() {
		if len(args) == 0 {
			return t.firstSimple(ctx, sql)
		}
		if !hasQueryOption(args) {
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
func (t *attemptTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.closed.Load() {
		return errRows{pgx.ErrTxClosed}, pgx.ErrTxClosed
	}
	t.scan(sql)
	if !t.begun || t.tracking() {
		if !hasQueryOption(args) {
			return t.firstQuery(ctx, sql, args)
		}
		if err := t.beginNow(ctx); err != nil {
			return errRows{err}, err
		}
	}
	t.after()
	return t.conn.Query(ctx, sql, args...)
}

// QueryRow runs a query for one row; the first statement of the attempt
// carries BEGIN.
func (t *attemptTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.closed.Load() {
		return errRows{pgx.ErrTxClosed}
	}
	t.scan(sql)
	if !t.begun || t.tracking() {
		if !hasQueryOption(args) {
			return t.firstQueryRow(ctx, sql, args)
		}
		if err := t.beginNow(ctx); err != nil {
			return errRows{err}
		}
	}
	t.after()
	return t.conn.QueryRow(ctx, sql, args...)
}

// Conn returns the connection, inside the transaction (BEGIN is sent
// first), or nil once the attempt has ended. What runs on it is not seen by
// pgtx: the transaction's id is read again at COMMIT, assigning one.
func (t *attemptTx) Conn() *pgx.Conn {
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
func (t *attemptTx) use(ctx context.Context) error {
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
func (t *attemptTx) pgxTx(ctx context.Context) pgx.Tx {
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
func (t *attemptTx) tracking() bool {
	return t.capture != captureNone && t.idRead && t.idNull && !t.stale && !t.notify
}

// after records a statement sent after the first write: it may give the
// transaction an id the first write did not see.
func (t *attemptTx) after() {
	if !t.idRead || t.idNull {
		t.stale = true
	}
}

// scan notes a statement that may send a notification (NOTIFY, pg_notify):
// such a transaction takes its id only at COMMIT, so COMMIT's write reads
// it with one assigned. The test is on the text, so a notification sent by
// a function whose name does not say so is not seen.
func (t *attemptTx) scan(sql string) {
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

// savepoint is a pseudo nested transaction of an attempt: pgx's, refusing
// every method once the attempt has ended.
type savepoint struct {
	pgx.Tx
	t *attemptTx
}

func (s *savepoint) open(sql string) error {
	if s.t.closed.Load() {
		return pgx.ErrTxClosed
	}
	s.t.scan(sql)
	s.t.after()
	return nil
}

// Begin starts a savepoint inside this one.
func (s *savepoint) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := s.open(""); err != nil {
		return nil, err
	}
	sp, err := s.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &savepoint{Tx: sp, t: s.t}, nil
}

// Commit releases the savepoint.
func (s *savepoint) Commit(ctx context.Context) error {
	if err := s.open(""); err != nil {
		return err
	}
	return s.Tx.Commit(ctx)
}

// Rollback rolls back to the savepoint.
func (s *savepoint) Rollback(ctx context.Context) error {
	if err := s.open(""); err != nil {
		return err
	}
	return s.Tx.Rollback(ctx)
}

// CopyFrom runs COPY FROM in the savepoint.
func (s *savepoint) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := s.open(""); err != nil {
		return 0, err
	}
	return s.Tx.CopyFrom(ctx, table, columns, src)
}

// SendBatch sends b in the savepoint.
func (s *savepoint) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := s.open(""); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	for _, qq := range b.QueuedQueries {
		s.t.scan(qq.SQL)
	}
	return s.Tx.SendBatch(ctx, b)
}

// Prepare prepares a statement.
func (s *savepoint) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := s.open(sql); err != nil {
		return nil, err
	}
	return s.Tx.Prepare(ctx, name, sql)
}

// Exec runs a statement in the savepoint.
func (s *savepoint) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := s.open(sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	return s.Tx.Exec(ctx, sql, args...)
}

// Query runs a query in the savepoint.
func (s *savepoint) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := s.open(sql); err != nil {
		return errRows{err}, err
	}
	return s.Tx.Query(ctx, sql, args...)
}

// QueryRow runs a query for one row in the savepoint.
func (s *savepoint) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := s.open(sql); err != nil {
		return errRows{err}
	}
	return s.Tx.QueryRow(ctx, sql, args...)
}

// Conn returns the connection, or nil once the attempt has ended.
func (s *savepoint) Conn() *pgx.Conn { return s.t.Conn() }
