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
	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/resolve"
	"github.com/pgtx-go/pgtx/internal/retry"
	"github.com/pgtx-go/pgtx/internal/txn"
)

// call is one Transaction call: its attempts acquire a connection, run fn
// on a fresh [txn.Tx], commit, and release.
type call struct {
	pool             *Pool
	fn               func(context.Context, pgx.Tx) error
	begin            string          // the BEGIN of its isolation and Options
	statementTimeout time.Duration   // Options.StatementTimeout
	label            string          // Options.Label
	uniqueAsConflict bool            // Options.RetryUniqueViolations under SERIALIZABLE
	parent           *attempt        // the attempt whose fn made this call, on another pool
	caller           <-chan struct{} // the caller's ctx.Done(), which names the call to a waiting one
	attempts         int
	first            attempt    // the first attempt's context, without an allocation
	cur              *attempt   // the current attempt's
	firstTx          txn.Tx     // the first attempt's handle, without an allocation
	loop             retry.Loop // the pool's loop, with the call's overrides
	trace            callTrace  // the loop's tracer when the pool has one, without an allocation
	// acquiring is the context of the first attempt's acquire, without
	// an allocation.
	acquiring waitsForHeld
	// The attempt's connection while it holds it.
	conn   *pgxpool.Conn
	heldAt time.Time
	slot   int
}

// newCall starts a call on p: the pool's retry loop, resolved once, with
// opts' overrides, its label's gate, and the pool's tracer.
func (p *Pool) newCall(ctx context.Context, iso Isolation, opts *Options, fn func(context.Context, pgx.Tx) error) *call {
	p.queue.calls.Add(1)
	c := &call{pool: p, fn: fn, begin: txn.BeginSQL(int(iso), opts.ReadOnly, opts.Deferrable),
		statementTimeout: opts.StatementTimeout, label: opts.Label,
		uniqueAsConflict: opts.RetryUniqueViolations && iso == Serializable,
		parent:           attemptOf(ctx), caller: ctx.Done(), loop: p.loop}
	c.loop.Policy = opts.override(p.loop.Policy)
	if p.contention != nil {
		c.loop.Gate = p.contention.Gate(opts.Label)
	}
	if p.settings.tracer != nil {
		c.trace = callTrace{tracer: p.settings.tracer, label: opts.Label, isolation: iso}
		c.loop.Tracer = &c.trace
	}
	return c
}

// run runs the call's attempts, driving its retry loop: control goes down
// into the loop, which says when to run another.
func (c *call) run(ctx context.Context) error {
	r := c.loop.Start(ctx)
	for {
		actx, admitted := r.Begin()
		var class Class
		var err error
		if admitted {
			class, err = c.runAttempt(actx)
		}
		if !r.End(classify.Class(class), err) {
			return r.Err()
		}
	}
}

// runAttempt acquires a connection, runs fn and COMMIT on it, and releases
// it before it returns, so the retry loop never sleeps holding one.
func (c *call) runAttempt(ctx context.Context) (Class, error) {
	c.attempts++
	a := &c.first
	if c.attempts > 1 {
		a = new(attempt)
	}
	*a = attempt{Context: ctx, pool: c.pool, parent: c.parent, n: c.attempts}
	c.cur = a
	// A connect made for an attempt's acquire may outlive it: the next
	// attempt's context is a new one.
	w := &c.acquiring
	if c.attempts > 1 {
		w = new(waitsForHeld)
	}
	w.Context = ctx
	conn, held, err := c.pool.acquire(w, c.caller)
	if err != nil {
		return acquireClass(ctx, err), err
	}
	c.conn, c.heldAt, c.slot = conn, held, c.pool.queue.inflight.Add(held, c.caller)
	defer c.Release()
	class, err := c.transact(ctx, conn)
	if c.uniqueAsConflict && class == ClassPermanent && isUniqueViolation(err) {
		class = ClassConflict
	}
	return class, err
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
		UnavailableTimeout: p.loop.Policy.UnavailableTimeout,
		Resolver:           p.resolver,
		Clock:              p.clock,
		Counters:           &p.resolved,
	}
	if w := p.acked; w != nil {
		s.Captured = func(system int64, run resolve.Run) { w.Seen(system, run, time.Now()) }
	}
	return s
}

// Release runs as soon as COMMIT's answer is lost too, so that the dead
// connection's slot is not held while the resolution waits.
func (c *call) Release() {
	if c.conn == nil {
		return
	}
	c.conn.Release()
	// The release tracer woke a waiter before the connection was back:
	// it is now.
	c.pool.slots.limit.Back()
	c.pool.queue.inflight.Remove(c.slot, c.pool.clock.Now().Sub(c.heldAt))
	c.conn = nil
}

// transact runs fn and COMMIT on conn; fn's handle refuses every method
// once it returns.
func (c *call) transact(ctx context.Context, conn *pgxpool.Conn) (Class, error) {
	if err := ctx.Err(); err != nil {
		return ClassTimeout, err
	}
	pc := conn.Conn()
	if err := txn.SetUp(ctx, pc, &c.pool.txn); err != nil {
		err = withContextErr(ctx, err)
		return Classify(err), err
	}
	t := &c.firstTx
	if c.attempts > 1 {
		t = new(txn.Tx)
	}
	t.Start(ctx, pc, &c.pool.txn, c.begin, c.statementTimeout)
	done := false
	defer func() {
		t.End()
		if !done {
			// Also on a panic in fn, which then goes on up unchanged.
			txn.Rollback(ctx, t)
		}
	}()

	if class, err := c.runFn(ctx, t, conn); err != nil {
		return class, err
	}
	done = true
	class, err := txn.Commit(ctx, t, c)
	if err == nil && c.pool.acked != nil {
		c.pool.acknowledged(t, c.label)
	}
	if err == nil {
		t.Committed(pc)
	}
	return Class(class), err
}

// runFn runs fn on t, and says whether COMMIT may follow: an error when
// it may not, and its class.
func (c *call) runFn(ctx context.Context, t *txn.Tx, conn *pgxpool.Conn) (Class, error) {
	a := c.cur
	a.Context = ctx
	a.setInFn(true, t)
	err := c.fn(a, t)
	a.setInFn(false, nil)
	if berr := t.BeginErr(); berr != nil {
		// BEGIN failed: that is the attempt's failure, whatever fn made of it.
		return classifyFnError(berr, conn), berr
	}
	if derr := t.DeferErr(); derr != nil {
		// A deferred statement failed: that too, but fn's error may wrap
		// it.
		if err == nil || !errors.Is(err, derr) {
			err = derr
		}
		return classifyFnError(err, conn), err
	}
	if err != nil {
		if misuse := t.CheckFailed(err); misuse != nil {
			return ClassPermanent, misuse
		}
		return classifyFnError(err, conn), err
	}
	if conn.Conn().PgConn().IsClosed() && t.Begun() {
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
	return classNone, nil
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
