package pgtx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Isolation is a transaction isolation level. It is a closed set: the SQL it
// stands for is chosen by pgtx, never taken from the caller. The zero value
// is not a level: Transaction refuses it, so a forgotten field never silently
// means something else.
type Isolation int

// The isolation levels of PostgreSQL. READ UNCOMMITTED is absent: PostgreSQL
// runs it as READ COMMITTED.
const (
	ReadCommitted Isolation = iota + 1
	RepeatableRead
	Serializable
)

// String returns the SQL name of the level, or "Isolation(n)" for a value
// that is not one.
func (i Isolation) String() string {
	switch i {
	case ReadCommitted:
		return "READ COMMITTED"
	case RepeatableRead:
		return "REPEATABLE READ"
	case Serializable:
		return "SERIALIZABLE"
	}
	return "Isolation(" + strconv.Itoa(int(i)) + ")"
}

func (i Isolation) valid() bool { return i >= ReadCommitted && i <= Serializable }

// Options are the per-call settings of [TransactionWithOptions] and
// [TransactionValue]. The zero value is valid: every field as configured on
// the [Pool].
type Options struct {
	// Label names the call in traces and metrics (e.g. "transfer").
	Label string

	// ReadOnly begins the transaction READ ONLY.
	ReadOnly bool

	// Deferrable begins the transaction DEFERRABLE. PostgreSQL gives it
	// effect only for SERIALIZABLE READ ONLY transactions, which then wait
	// for a safe snapshot and can never fail with 40001.
	Deferrable bool

	// StatementTimeout, when positive, limits every statement of this
	// transaction: it is sent as SET LOCAL statement_timeout in the same
	// round trip as BEGIN. 0 keeps the session's ([Config].StatementTimeout);
	// negative: no statement timeout for this transaction
	// (statement_timeout 0), except what the context's deadline carries.
	StatementTimeout time.Duration

	// MaxRetries overrides [RetryPolicy].MaxRetries for this call: 0 keeps
	// the pool's, negative means no conflict or lost-connection retries.
	MaxRetries int

	// MaxAdaptiveRetries overrides [RetryPolicy].MaxAdaptiveRetries for
	// this call: 0 keeps the pool's, negative means no overload retries.
	MaxAdaptiveRetries int

	// UnavailableTimeout overrides [RetryPolicy].UnavailableTimeout for
	// this call: 0 keeps the pool's, negative means an unavailable server
	// is not retried.
	UnavailableTimeout time.Duration

	// RetryUniqueViolations, under [Serializable], retries a unique
	// violation (23505) or an exclusion violation (23P01) as a conflict.
	// The PostgreSQL documentation (§13.5, "Serialization Failure
	// Handling") notes that such an error can be a serialization failure
	// in disguise: two transactions that each checked a key was free and
	// then both inserted it. Retried, the loser sees the winner's row and
	// takes its other path. It is off by default because a true duplicate
	// then costs MaxRetries retries before it is returned: switch it on
	// only for transactions that check before they insert. Ignored at
	// other isolation levels.
	RetryUniqueViolations bool
}

// Transaction runs fn in a transaction on a connection from pool and commits
// it. It is [TransactionWithOptions] with the zero [Options].
//
// On a serialization failure (40001) or deadlock (40P01) the whole
// transaction runs again — a new BEGIN, fn again, a new COMMIT — after a
// short jittered pause. On an overload error it backs off exponentially with
// full jitter; a server it cannot connect to (refused while it restarts, no
// read-write host while a standby is promoted) is retried the same way until
// ctx's deadline or [RetryPolicy].UnavailableTimeout, whichever comes
// first. If the connection is lost before COMMIT it runs again on a fresh
// connection. If the connection is lost while COMMIT is in flight,
// pgtx asks the server whether it committed ([Config].ResolveTimeout); when
// nothing can tell, the error matches [ErrCommitUnknown] and fn is not run
// again. Timeouts (57014, context errors, [ErrAcquireTimeout]) and all other
// errors end the call. fn must therefore be safe to run more than once:
// work outside the transaction (an HTTP call, a message) belongs in
// [AfterCommit]. [Attempt] tells fn which attempt it is.
//
// fn receives ctx and a [pgx.Tx] whose Commit and Rollback are refused:
// Transaction ends the transaction itself. fn calling them, or returning
// with rows still open, is an error matching [ErrInvalidArgument] that says
// so, and the transaction is rolled back: nothing is committed; so is
// calling Transaction again, on the same pool, with the ctx fn received
// ([ErrNestedTransaction]).
//
// A statement that ends the transaction is another matter: the server runs
// it as sent. A COMMIT or END commits fn's statements before it (rolls
// them back if the transaction had failed), a ROLLBACK or ABORT discards
// them, and the statements fn runs after it commit one by one. Transaction
// sees, when fn returns nil or an error, that the transaction has ended,
// and returns an error matching [ErrInvalidArgument] that says so and
// keeps fn's error: it commits and rolls back nothing more, and does not
// run fn again, which would commit that work twice. What such a COMMIT
// committed therefore stays committed, although the call returns an
// error. A BEGIN inside the transaction is a no-op the server warns about.
// COMMIT AND CHAIN and ROLLBACK AND CHAIN, or a COMMIT followed by a
// BEGIN, are not seen: they end fn's transaction as COMMIT and ROLLBACK
// do and open another, which Transaction takes for fn's. It commits that
// one when fn returns nil; on an error it rolls it back and may run fn
// again (committing again what the first COMMIT committed); and when
// COMMIT's answer is lost, the resolution asks about the first
// transaction, whose "committed" then makes the call return nil although
// the work after the chain may not have committed. Leave ending the
// transaction to Transaction.
//
// When ctx ends the call (the
// statement was cancelled, or a retry was due), errors.Is(err, ctx.Err())
// holds; an unknown COMMIT outcome or fn's own error that merely raced the
// cancellation keeps its class. If ctx has ended by the time fn returns
// nil, the transaction is rolled back, not committed. When ctx has a
// deadline, the server gets it too: the transaction's statement_timeout is
// the time left (never above the configured one), so the server stops the
// work even if this process dies. A panic in fn rolls back, releases the
// connection and propagates unchanged.
//
// After more than one attempt, or when a retry was refused, the error is a
// [*RetryError] that says how many attempts were made and why no more; so
// is the error of every call that ended on a server it could not connect
// to, whose message begins "pgtx: the server is unreachable".
func Transaction(ctx context.Context, pool *Pool, iso Isolation, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return TransactionWithOptions(ctx, pool, iso, Options{}, fn)
}

// TransactionWithOptions is [Transaction] with per-call [Options]: read-only
// and deferrable transactions, a statement timeout for this transaction
// only, retry caps, the retry of unique violations under SERIALIZABLE, and
// a label. Bad input (an unknown isolation level, a nil pool, a nil fn) is
// an error matching [ErrInvalidArgument] and sends nothing.
func TransactionWithOptions(ctx context.Context, pool *Pool, iso Isolation, opts Options, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if err := validateCall(ctx, pool, iso, fn); err != nil {
		return err
	}
	pool.queue.calls.Add(1)
	a := &txAttempt{pool: pool, iso: iso, opts: opts, fn: fn, resolve: pool.settings.resolveCommits,
		uniqueAsConflict: opts.RetryUniqueViolations && iso == Serializable}
	a.parent = attemptOf(ctx)
	loop := retryLoop{
		policy:     &pool.settings.retry,
		clock:      pool.clock,
		maxRetries: pool.settings.retry.MaxRetries,
		budget:     pool.budget,
		tracer:     pool.settings.tracer,
		label:      opts.Label,
		isolation:  iso,
	}
	if pool.contention != nil {
		loop.gate = pool.contention.gate(opts.Label)
	}
	if opts.MaxRetries != 0 {
		loop.maxRetries = defaultOrNone(opts.MaxRetries, 0)
	}
	loop.policy = opts.retryPolicy(loop.policy)
	var err error
	if pool.breaker == nil {
		err = loop.run(ctx, a.run)
	} else {
		err = pool.breaker.do(ctx, func(ctx context.Context) error { return loop.run(ctx, a.run) })
	}
	if err == nil {
		a.cur.afterCommit(ctx)
	}
	return err
}

// retryPolicy returns the retry policy of a call with these options on a
// pool whose policy is p: p itself, or a copy with the per-call overrides.
func (o Options) retryPolicy(p *RetryPolicy) *RetryPolicy {
	if o.MaxAdaptiveRetries == 0 && o.UnavailableTimeout == 0 {
		return p
	}
	policy := *p
	if o.MaxAdaptiveRetries != 0 {
		policy.MaxAdaptiveRetries = defaultOrNone(o.MaxAdaptiveRetries, 0)
	}
	if o.UnavailableTimeout != 0 {
		policy.UnavailableTimeout = defaultOrNone(o.UnavailableTimeout, 0)
	}
	return &policy
}

// TransactionValue is [TransactionWithOptions] for a fn that returns a
// value: the value of the attempt that committed, or the zero value with
// the error.
func TransactionValue[T any](ctx context.Context, pool *Pool, iso Isolation, opts Options, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var v, zero T
	var inner func(context.Context, pgx.Tx) error
	if fn != nil {
		inner = func(ctx context.Context, tx pgx.Tx) error {
			r, err := fn(ctx, tx)
			v = r
			return err
		}
	}
	if err := TransactionWithOptions(ctx, pool, iso, opts, inner); err != nil {
		return zero, err
	}
	return v, nil
}

func validateCall(ctx context.Context, pool *Pool, iso Isolation, fn func(context.Context, pgx.Tx) error) error {
	switch {
	case ctx == nil:
		return &invalidArgError{msg: "nil context"}
	case pool == nil:
		return &invalidArgError{msg: "nil pool"}
	case pool.pool == nil || pool.queue == nil:
		return errPoolNotOpened
	case fn == nil:
		return &invalidArgError{msg: "nil fn"}
	case !iso.valid():
		return &invalidArgError{msg: fmt.Sprintf("unknown isolation level %d: use ReadCommitted, RepeatableRead or Serializable", int(iso))}
	}
	if attemptOf(ctx).inside(pool) {
		return nestedError{}
	}
	return nil
}

// What BEGIN's round trip captures for a resolution.
const (
	captureNone   = iota
	captureDirect // the id (captureSQL)
	capturePooled // the id and the server's run (capturePooledSQL)
)

// captureSQLs are the statements of each capture.
var captureSQLs = [...]string{captureNone: "", captureDirect: captureSQL, capturePooled: capturePooledSQL}

// beginSQLs holds every BEGIN statement pgtx sends without a per-call
// timeout, indexed by what it captures, isolation, read-only and
// deferrable, so a transaction does not allocate to build it.
var beginSQLs = func() (s [len(captureSQLs)][Serializable + 1][2][2]string) {
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
				for c, capture := range captureSQLs {
					s[c][iso][ro][def] = q + capture
				}
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

// beginSQL renders the statement that opens the attempt's transaction,
// followed by what capture says to capture. A statement timeout (the
// call's, or the time left before ctx's deadline when that is shorter than
// the one in force) rides in the same simple-protocol query as BEGIN (one
// round trip); its value is an integer, never caller text.
func (a *txAttempt) beginSQL(ctx context.Context, capture int) string {
	opts := a.opts
	timeout := opts.StatementTimeout // > 0: the call's; < 0: none; 0: the session's
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
		return beginSQLs[capture][a.iso][b2i(opts.ReadOnly)][b2i(opts.Deferrable)]
	}
	// One allocation: the statement is built in a buffer on the stack.
	var buf [512]byte
	q := append(buf[:0], beginSQLs[0][a.iso][b2i(opts.ReadOnly)][b2i(opts.Deferrable)]...)
	q = append(q, "; set local statement_timeout = "...)
	q = strconv.AppendInt(q, durationMillis(max(timeout, 0)), 10)
	q = append(q, captureSQLs[capture]...)
	return string(q)
}

// txAttempt is one call's attempt: acquire, BEGIN, fn, COMMIT, release.
type txAttempt struct {
	pool             *Pool
	iso              Isolation
	opts             Options
	fn               func(context.Context, pgx.Tx) error
	resolve          bool        // capture the transaction id, to resolve a lost COMMIT
	uniqueAsConflict bool        // Options.RetryUniqueViolations under SERIALIZABLE
	tx               fnTx        // what fn receives, reused by every attempt of the call
	parent           *attemptCtx // the attempt whose fn made this call, on another pool
	attempts         int
	first            attemptCtx  // the first attempt's context, without an allocation
	cur              *attemptCtx // the current attempt's
}

// beginKind is how an attempt's transaction began.
type beginKind int

const (
	beganPlain      beginKind = iota // pgx's BEGIN; the pool does not resolve
	beganCaptured                    // BEGIN with the id captured: resolvable
	beganUncaptured                  // a resolving pool, a server that cannot be asked
	beganInRecovery                  // a resolving pool, on a hot standby: it writes nothing
	beganOnPromoted                  // a resolving pool, a connection made to a standby since promoted
)

// run performs one attempt. It returns only after the connection has been
// rolled back (if needed) and released, so the retry loop never sleeps while
// holding a connection.
func (a *txAttempt) run(ctx context.Context) (Class, error) {
	a.attempts++
	ac := &a.first
	if a.attempts > 1 {
		ac = new(attemptCtx)
	}
	*ac = attemptCtx{Context: ctx, pool: a.pool, parent: a.parent, n: a.attempts}
	a.cur = ac
	c, err := a.held(ctx)
	if a.uniqueAsConflict && c == ClassPermanent && isUniqueViolation(err) {
		c = ClassConflict
	}
	return c, err
}

// held acquires a connection, runs the attempt on it and releases it.
func (a *txAttempt) held(ctx context.Context) (Class, error) {
	conn, held, err := a.pool.acquire(ctx)
	if err != nil {
		return Classify(err), err
	}
	q := a.pool.queue
	slot := q.inflight.add(held)
	defer func() {
		conn.Release()
		q.inflight.remove(slot)
		q.held.Add(1)
		q.holdTime.Add(int64(a.pool.clock.Now().Sub(held)))
	}()
	// The work on the connection is a function of its own so that each of
	// the two defers is in a function with few returns, which the compiler
	// runs inline instead of through the runtime's defer records.
	return a.onConn(ctx, conn)
}

// onConn runs BEGIN, fn and COMMIT on conn, rolling back when it does not
// commit.
func (a *txAttempt) onConn(ctx context.Context, conn *pgxpool.Conn) (Class, error) {
	if err := ctx.Err(); err != nil {
		// The deadline passed while waiting for the connection: do not begin
		// a transaction nobody will read.
		return ClassTimeout, err
	}

	pgConn := conn.Conn().PgConn()
	tx, id, began, err := a.beginTx(ctx, conn.Conn())
	if err != nil {
		return Classify(err), err
	}
	done := false
	defer func() {
		if !done {
			// Runs on an error and on a panic in fn (which then goes on up
			// the stack unchanged): roll back on a context the caller's
			// cancellation cannot interrupt. A failed rollback closes the
			// connection, and Release then discards it.
			switch {
			case began == beganCaptured:
				rollbackConn(ctx, pgConn, a.pool.settings.rollbackTimeout)
			case pgConn.TxStatus() == 'I' && !pgConn.IsBusy():
				// A statement of fn's ended the transaction: a ROLLBACK
				// now would only draw the server's warning that there is
				// no transaction in progress.
			default:
				a.rollback(ctx, tx, pgConn.Conn())
			}
		}
	}()

	a.tx = fnTx{Tx: tx, pgConn: pgConn}
	ac := a.cur
	ac.Context, ac.inFn = ctx, true
	err = a.fn(ac, &a.tx)
	ac.inFn = false
	if err != nil {
		if misuse := a.tx.checkFailed(err); misuse != nil {
			return ClassPermanent, misuse
		}
		return classifyFnError(err, conn), err
	}
	if pgConn.IsClosed() {
		// fn swallowed the error of a connection that died under it: the
		// transaction died with its session, and COMMIT is never sent.
		return ClassConnectionLost, errLostBeforeCommit
	}
	if err := a.tx.check(); err != nil {
		return ClassPermanent, err
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up while fn ran: COMMIT is not sent for a caller
		// who is gone (as pgx's BeginTxFunc would not), and the transaction
		// is rolled back.
		return ClassTimeout, err
	}

	done = true
	if began == beganCaptured {
		return a.commitCaptured(ctx, pgConn, pgConn.Conn(), id)
	}
	c, err := a.commit(ctx, tx, pgConn.Conn())
	if c == ClassAmbiguous && began != beganPlain {
		return a.pool.notResolvable(pgConn, began, err)
	}
	return c, err
}

// beginTx begins the attempt's transaction on conn. In a resolving pool, on
// a server that can be asked, it captures the transaction id in BEGIN's
// round trip and hands fn the connection's pgx handle; otherwise it is
// pgx's BEGIN.
func (a *txAttempt) beginTx(ctx context.Context, conn *pgx.Conn) (pgx.Tx, txID, beginKind, error) {
	if !a.resolve {
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: a.beginSQL(ctx, captureNone)})
		return tx, txID{}, beganPlain, err
	}
	pgConn := conn.PgConn()
	h, _ := pgConn.CustomData()[customDataKey].(*cancelHandler)
	kind := beganCaptured
	switch {
	case h == nil || !h.res.capable:
		kind = beganUncaptured
	case h.res.inRecovery(pgConn):
		// No id can be given in recovery, and none is needed: a
		// transaction begun there can change nothing.
		kind = beganInRecovery
	case h.res.standby:
		// Made on a standby since promoted: the run it captured is not
		// the one its transactions now run in.
		kind = beganOnPromoted
	}
	if kind != beganCaptured {
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: a.beginSQL(ctx, captureNone)})
		return tx, txID{}, kind, err
	}
	id := txID{system: h.res.system, run: h.res.run, flushed: h.res.flushed}
	capture := captureDirect
	if !h.res.direct {
		capture = capturePooled
	}
	if err := beginCapturing(ctx, pgConn, a.beginSQL(ctx, capture), &id); err != nil {
		// A statement after BEGIN may have failed, leaving a transaction
		// open: end it, so the connection can be reused.
		rollbackConn(ctx, pgConn, a.pool.settings.rollbackTimeout)
		return nil, txID{}, beganCaptured, err
	}
	return h.res.tx, id, beganCaptured, nil
}

// errLostBeforeCommit is the error of an attempt whose connection was closed
// when fn returned nil.
var errLostBeforeCommit = fmt.Errorf("pgtx: the connection was lost before COMMIT was sent: %w", pgconn.ErrConnClosed)

// classifyFnError classifies an error returned by fn. A network-level error
// only counts as a lost connection when the transaction's connection is in
// fact gone: fn may return a network error from some other system, which
// must not make pgtx run the transaction again.
func classifyFnError(err error, conn *pgxpool.Conn) Class {
	c := Classify(err)
	if c == ClassConnectionLost && !conn.Conn().IsClosed() {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			return ClassPermanent
		}
	}
	return c
}

// commit sends COMMIT on a context the caller's cancellation cannot
// interrupt, bounded by the pool's CommitTimeout (a deadline on the
// connection's socket nc: when it passes, the read fails and pgx closes the
// connection), and classifies the result:
// a server error is definitive (40001 at COMMIT is a conflict and retried);
// anything else leaves the outcome unknown.
func (a *txAttempt) commit(ctx context.Context, tx pgx.Tx, nc net.Conn) (Class, error) {
	_ = nc.SetDeadline(deadlineAfter(a.pool.settings.commitTimeout))
	err := tx.Commit(uncancellable(ctx))
	_ = nc.SetDeadline(time.Time{})
	if err == nil {
		return ClassNone, nil
	}
	if notCommitted(err) {
		return Classify(err), err
	}
	if errors.Is(err, pgx.ErrTxCommitRollback) {
		// The server answered ROLLBACK: the transaction had failed inside fn
		// (an error fn swallowed). Definitive, and not retried.
		return ClassPermanent, err
	}
	// Not trusting pgconn.SafeToRetry here: pgx can report a COMMIT that
	// reached a dead connection as pgconn.ErrConnClosed. Any failure without
	// a server answer is ambiguous, and so is an answer that ended the
	// session: a FATAL during COMMIT (57P01 while waiting for synchronous
	// replication, a pooler killing the server connection) may come after
	// the commit record was written.
	return ClassAmbiguous, &commitUnknownError{err: err}
}

// notCommitted reports a COMMIT error that is definitive: a server error
// that leaves the session alive (the transaction did not commit; 40001 at
// COMMIT is a conflict), or a session ended while it idled before COMMIT,
// which then never ran.
func notCommitted(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (!endsSession(pgErr) || endedIdle(pgErr))
}

// endsSession reports a server error that ended the session (FATAL or PANIC,
// or a connection-lost code): at COMMIT its outcome is unknown.
func endsSession(e *pgconn.PgError) bool {
	switch e.SeverityUnlocalized {
	case "FATAL", "PANIC":
		return true
	case "":
		if e.Severity == "FATAL" || e.Severity == "PANIC" {
			return true
		}
	}
	return classifyPgError(e) == ClassConnectionLost
}

// rollback rolls tx back on a context that the caller's cancellation cannot
// interrupt, bounded by the pool's RollbackTimeout (a deadline on the
// connection's socket nc).
func (a *txAttempt) rollback(ctx context.Context, tx pgx.Tx, nc net.Conn) {
	_ = nc.SetDeadline(deadlineAfter(a.pool.settings.rollbackTimeout))
	_ = tx.Rollback(uncancellable(ctx)) // on failure pgx closes the connection; Release discards it
	_ = nc.SetDeadline(time.Time{})
}

// uncancellable returns ctx without its cancellation (values kept, for
// tracers). A context that cannot be cancelled is returned as is, so pgx does
// not watch it either.
func uncancellable(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}
