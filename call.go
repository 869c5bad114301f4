package pgtx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/resolve"
	"github.com/pgtx-go/pgtx/internal/txn"
)

// call is one call: its attempts acquire a connection, run fn on a
// fresh [txn.Tx], commit, and release.
type call struct {
	pool             *Pool
	statementTimeout time.Duration // Options.StatementTimeout
	fn               func(context.Context, pgx.Tx) error
	readOnly         bool            // Options.ReadOnly
	deferrable       bool            // Options.Deferrable
	uniqueAsConflict bool            // Options.RetryUniqueViolations under SERIALIZABLE
	parent           *attempt        // the attempt whose fn made this call, on another pool
	caller           <-chan struct{} // the caller's ctx.Done(), which names the call to a waiting one
	attempts         int
	first            attempt   // the first attempt's context, without an allocation
	cur              *attempt  // the current attempt's
	firstTx          txn.Tx    // the first attempt's handle, without an allocation
	loop             retryLoop // the call's retry loop, here to be its tracer without an allocation
	// The attempt's connection while it holds it: when it was acquired and
	// its slot among the attempts in flight.
	conn   *pgxpool.Conn
	heldAt time.Time
	slot   int
}

// txnSettings resolves what p's transactions need of it, once per pool.
func (p *Pool) txnSettings() txn.Settings {
	s := txn.Settings{
		CommitTimeout:   p.settings.commitTimeout,
		RollbackTimeout: p.settings.rollbackTimeout,
		SessionTimeout:  p.settings.statementTimeout,
		Resolving:       p.settings.resolveCommits,
		ResolveTimeout:  p.settings.resolveTimeout,
		// A failover or a restart takes seconds: a resolution rides it
		// out as a call does.
		UnavailableTimeout: p.settings.retry.UnavailableTimeout,
		Resolver:           p.resolver,
		Clock:              p.clock,
		Counters:           &p.resolved,
	}
	if w := p.acked; w != nil {
		s.Captured = func(system int64, run resolve.Run) { w.Seen(system, run, time.Now()) }
	}
	return s
}

// run performs one attempt. It returns only after the connection has been
// rolled back (if needed) and released, so the retry loop never sleeps while
// holding a connection.
func (a *call) run(ctx context.Context) (Class, error) {
	a.attempts++
	ac := &a.first
	if a.attempts > 1 {
		ac = new(attempt)
	}
	*ac = attempt{Context: ctx, pool: a.pool, parent: a.parent, n: a.attempts}
	a.cur = ac
	c, err := a.held(ctx)
	if a.uniqueAsConflict && c == ClassPermanent && isUniqueViolation(err) {
		c = ClassConflict
	}
	return c, err
}

// held acquires a connection, runs the attempt on it and releases it.
func (a *call) held(ctx context.Context) (Class, error) {
	conn, held, err := a.pool.acquire(ctx, a.caller)
	if err != nil {
		return acquireClass(ctx, err), err
	}
	a.conn, a.heldAt, a.slot = conn, held, a.pool.queue.inflight.Add(held, a.caller)
	defer a.Release()
	// The work on the connection is a function of its own so that each of
	// the two defers is in a function with few returns, which the compiler
	// runs inline instead of through the runtime's defer records.
	return a.onConn(ctx, conn)
}

// Release gives the attempt's connection back to the pool, once: when the
// attempt ends, or as soon as COMMIT's answer is lost ([txn.Releaser]), so
// that the dead connection's slot is not held while the resolution waits.
func (a *call) Release() {
	if a.conn == nil {
		return
	}
	a.conn.Release()
	a.pool.queue.inflight.Remove(a.slot, a.pool.clock.Now().Sub(a.heldAt))
	a.conn = nil
}

// onConn runs fn and COMMIT on conn, rolling back when it does not commit.
// fn's handle refuses every method once this returns.
func (a *call) onConn(ctx context.Context, conn *pgxpool.Conn) (Class, error) {
	if err := ctx.Err(); err != nil {
		// The deadline passed while waiting for the connection: do not begin
		// a transaction nobody will read.
		return ClassTimeout, err
	}
	c := conn.Conn()
	if err := txn.SetUp(ctx, c, &a.pool.txn); err != nil {
		err = withContextErr(ctx, err)
		return Classify(err), err
	}
	t := &a.firstTx
	if a.attempts > 1 {
		t = new(txn.Tx)
	}
	t.Start(ctx, c, &a.pool.txn, txn.BeginSQL(int(a.loop.isolation), a.readOnly, a.deferrable), a.statementTimeout)
	done := false
	defer func() {
		t.End()
		if !done {
			// Runs on an error and on a panic in fn (which then goes on up
			// the stack unchanged).
			txn.Rollback(ctx, t)
		}
	}()

	ac := a.cur
	ac.Context = ctx
	ac.setInFn(true)
	err := a.fn(ac, t)
	ac.setInFn(false)
	if berr := t.BeginErr(); berr != nil {
		// BEGIN failed: that is the attempt's failure, whatever fn made of
		// it.
		return Classify(berr), berr
	}
	if err != nil {
		if misuse := t.CheckFailed(err); misuse != nil {
			return ClassPermanent, misuse
		}
		return classifyFnError(err, conn), err
	}
	if c.PgConn().IsClosed() && t.Begun() {
		// fn swallowed the error of a connection that died under it: the
		// transaction died with its session, and COMMIT is never sent.
		return ClassConnectionLost, errLostBeforeCommit
	}
	if err := t.Check(); err != nil {
		return ClassPermanent, err
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up while fn ran: COMMIT is not sent for a caller
		// who is gone (as pgx's BeginTxFunc would not), and the transaction
		// is rolled back.
		return ClassTimeout, err
	}
	done = true
	class, err := txn.Commit(ctx, t, a)
	if Class(class) == ClassAmbiguous {
		err = commitUnknown(err)
	}
	if err == nil && a.pool.acked != nil {
		a.pool.acknowledged(t, a.loop.label)
	}
	return Class(class), err
}

// acquireClass classifies an acquire's error as [Classify] does, but for a
// connect that timed out while ctx still runs (its deadline was the connect
// timeout's, not the caller's), or an acquire timeout that came while the
// pool, with room, was connecting: a server too slow to accept, which may
// be too loaded to, is an overload.
func acquireClass(ctx context.Context, err error) Class {
	if ctx.Err() != nil {
		return Classify(err)
	}
	var connectErr *pgconn.ConnectError
	var timeoutErr *acquireTimeoutError
	if errors.As(err, &connectErr) && pgconn.Timeout(err) || errors.As(err, &timeoutErr) && timeoutErr.connecting {
		return ClassOverload
	}
	return Classify(err)
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
