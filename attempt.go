package pgtx

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// txAttempt is one call: its attempts acquire a connection, run fn on a
// fresh [attemptTx], commit, and release.
type txAttempt struct {
	pool             *Pool
	iso              Isolation
	opts             Options
	fn               func(context.Context, pgx.Tx) error
	uniqueAsConflict bool        // Options.RetryUniqueViolations under SERIALIZABLE
	parent           *attemptCtx // the attempt whose fn made this call, on another pool
	attempts         int
	first            attemptCtx  // the first attempt's context, without an allocation
	cur              *attemptCtx // the current attempt's
	firstTx          attemptTx   // the first attempt's handle, without an allocation
}

// beginKind is what an attempt's transaction can be resolved with.
type beginKind int

const (
	beganPlain      beginKind = iota // the pool does not resolve
	beganCaptured                    // its id is read: resolvable
	beganUncaptured                  // a resolving pool, a server that cannot be asked
	beganInRecovery                  // a resolving pool, on a hot standby: it writes nothing
	beganOnPromoted                  // a resolving pool, a connection made to a standby since promoted
)

// kindOn returns how a transaction on pgConn is resolved, and what its
// first write captures.
func (a *txAttempt) kindOn(pgConn *pgconn.PgConn) (beginKind, capture) {
	if !a.pool.settings.resolveCommits {
		return beganPlain, captureNone
	}
	st := stateOf(pgConn)
	switch {
	case st == nil || !st.res.Capable:
		return beganUncaptured, captureNone
	case st.res.InRecovery(pgConn):
		// No id can be given in recovery, and none is needed: a
		// transaction begun there can change nothing.
		return beganInRecovery, captureNone
	case st.res.Standby:
		// Made on a standby since promoted: the run it captured is not
		// the one its transactions now run in.
		return beganOnPromoted, captureNone
	case !st.res.Direct:
		return beganCaptured, captureIDRun
	}
	return beganCaptured, captureID
}

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
	slot := q.inflight.Add(held)
	defer func() {
		conn.Release()
		q.inflight.Remove(slot, a.pool.clock.Now().Sub(held))
	}()
	// The work on the connection is a function of its own so that each of
	// the two defers is in a function with few returns, which the compiler
	// runs inline instead of through the runtime's defer records.
	return a.onConn(ctx, conn)
}

// onConn runs fn and COMMIT on conn, rolling back when it does not commit.
// fn's handle refuses every method once this returns.
func (a *txAttempt) onConn(ctx context.Context, conn *pgxpool.Conn) (Class, error) {
	if err := ctx.Err(); err != nil {
		// The deadline passed while waiting for the connection: do not begin
		// a transaction nobody will read.
		return ClassTimeout, err
	}
	c := conn.Conn()
	t := &a.firstTx
	if a.attempts > 1 {
		t = new(attemptTx)
	}
	kind, capture := a.kindOn(c.PgConn())
	*t = attemptTx{a: a, conn: c, pgConn: c.PgConn(), ctx: ctx, capture: capture}
	if st := stateOf(c.PgConn()); capture != captureNone {
		// The server's run as the connection saw it when it was made: a
		// direct connection's lives as long as its backend (behind a
		// pooler the id read captures it again).
		t.id = resolve.ID{System: st.res.System, Run: st.res.Run, Flushed: st.res.Flushed}
	}
	done := false
	defer func() {
		t.closed.Store(true)
		if !done {
			// Runs on an error and on a panic in fn (which then goes on up
			// the stack unchanged).
			a.rollback(ctx, t)
		}
	}()

	ac := a.cur
	ac.Context = ctx
	ac.setInFn(true)
	err := a.fn(ac, t)
	ac.setInFn(false)
	if t.beginErr != nil {
		// BEGIN failed: that is the attempt's failure, whatever fn made of
		// it.
		return Classify(t.beginErr), t.beginErr
	}
	if err != nil {
		if misuse := t.checkFailed(err); misuse != nil {
			return ClassPermanent, misuse
		}
		return classifyFnError(err, conn), err
	}
	if c.PgConn().IsClosed() && t.begun {
		// fn swallowed the error of a connection that died under it: the
		// transaction died with its session, and COMMIT is never sent.
		return ClassConnectionLost, errLostBeforeCommit
	}
	if err := t.check(); err != nil {
		return ClassPermanent, err
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up while fn ran: COMMIT is not sent for a caller
		// who is gone (as pgx's BeginTxFunc would not), and the transaction
		// is rolled back.
		return ClassTimeout, err
	}
	done = true
	return a.commit(ctx, t, kind)
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
