package pgtx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
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
	// The attempt's connection while it holds it.
	conn   *pgxpool.Conn
	heldAt time.Time
	slot   int
}

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

// run returns only after the connection is released, so the retry loop
// never sleeps holding one.
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

func (a *call) held(ctx context.Context) (Class, error) {
	conn, held, err := a.pool.acquire(ctx, a.caller)
	if err != nil {
		return acquireClass(ctx, err), err
	}
	a.conn, a.heldAt, a.slot = conn, held, a.pool.queue.inflight.Add(held, a.caller)
	defer a.Release()
	return a.onConn(ctx, conn)
}

// Release runs as soon as COMMIT's answer is lost too, so that the dead
// connection's slot is not held while the resolution waits.
func (a *call) Release() {
	if a.conn == nil {
		return
	}
	a.conn.Release()
	a.pool.queue.inflight.Remove(a.slot, a.pool.clock.Now().Sub(a.heldAt))
	a.conn = nil
}

// onConn runs fn and COMMIT on conn; fn's handle refuses every method once
// it returns.
func (a *call) onConn(ctx context.Context, conn *pgxpool.Conn) (Class, error) {
	if err := ctx.Err(); err != nil {
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
			// Also on a panic in fn, which then goes on up unchanged.
			txn.Rollback(ctx, t)
		}
	}()

	ac := a.cur
	ac.Context = ctx
	ac.setInFn(true)
	err := a.fn(ac, t)
	ac.setInFn(false)
	if berr := t.BeginErr(); berr != nil {
		// BEGIN failed: that is the attempt's failure, whatever fn made of it.
		return classifyFnError(berr, conn), berr
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
		// COMMIT is not sent for a caller who is gone, as in pgx's
		// BeginTxFunc.
		return ClassTimeout, err
	}
	done = true
	class, err := txn.Commit(ctx, t, a)
	if Class(class) == ClassAmbiguous {
		if !a.pool.settings.resolveCommits {
			a.pool.resolved.Unknown.Add(1) // a resolution counts its own
		}
	}
	if err == nil && a.pool.acked != nil {
		a.pool.acknowledged(t, a.loop.label)
	}
	return Class(class), err
}

// acquireClass counts a connect that timed out while ctx still runs, or an
// acquire timeout while the pool was connecting, as overload: a server too
// slow to accept may be too loaded to.
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

var errLostBeforeCommit = fmt.Errorf("pgtx: the connection was lost before COMMIT was sent: %w", pgconn.ErrConnClosed)

// classifyFnError counts a network error as a lost connection only when the
// transaction's connection is gone: fn may return one from another system.
// An internal error (XX000) after which the connection closed is a lost
// connection too: Pgpool-II ends the session after an error of its own
// (with its default code, whatever the text), and the transaction with it.
func classifyFnError(err error, conn *pgxpool.Conn) Class {
	c := Classify(err)
	closed := conn.Conn().IsClosed()
	var pgErr *pgconn.PgError
	isPgErr := errors.As(err, &pgErr)
	switch {
	case c == ClassConnectionLost && !closed && !isPgErr:
		return ClassPermanent
	case c == ClassPermanent && closed && isPgErr && pgErr.Code == pgerrcode.InternalError:
		return ClassConnectionLost
	}
	return c
}
