package pgtx

import (
	"context"
	"errors"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// callState is what the context of fn tells about its call: the pool (to
// refuse a nested call), the attempt number, and the work registered to run
// after the commit.
type callState struct {
	pool    *Pool
	parent  *callState // the call fn of which made this one (on another pool)
	attempt int
	inFn    bool // fn of the current attempt is running
	hooks   []func(context.Context)
}

// callKey is the context key of a callState.
type callKey struct{}

// callContext is the context fn receives: the attempt's context, which also
// carries the call's state. It is part of the call's txAttempt, so it costs
// no allocation of its own.
type callContext struct {
	context.Context
	call *callState
}

// Value returns the call's state for callKey, and otherwise asks the
// attempt's context.
func (c *callContext) Value(key any) any {
	if key == (callKey{}) {
		return c.call
	}
	return c.Context.Value(key)
}

// callOf returns the state of the innermost call ctx is inside, or nil.
func callOf(ctx context.Context) *callState {
	c, _ := ctx.Value(callKey{}).(*callState)
	return c
}

// inside reports whether the call or one of its parents runs on pool.
func (c *callState) inside(pool *Pool) bool {
	for ; c != nil; c = c.parent {
		if c.pool == pool {
			return true
		}
	}
	return false
}

// begin starts the next attempt: the work the previous attempt registered
// is dropped with its transaction.
func (c *callState) begin() {
	c.attempt++
	clear(c.hooks)
	c.hooks = c.hooks[:0]
	c.inFn = true
}

// fnReturned marks the end of fn: AfterCommit is refused from then on.
func (c *callState) fnReturned() { c.inFn = false }

// afterCommit runs the work the committed attempt registered, in order.
func (c *callState) afterCommit(ctx context.Context) {
	hooks := c.hooks
	c.hooks = nil
	for _, h := range hooks {
		h(ctx)
	}
}

// AfterCommit registers fn to run once the transaction whose fn received ctx
// has committed: exactly once, after COMMIT succeeded (or a lost COMMIT was
// resolved as committed) and the connection went back to the pool, with the
// call's own context, before [Transaction] returns nil. Work registered by
// an attempt that rolled back or was retried is dropped with it, so an HTTP
// call, a message or a cache update registered here happens once however
// often fn ran.
//
// When the call fails, fn is not run; that includes [ErrCommitUnknown],
// where the transaction may have committed: the caller, who sees that
// error, decides (for a message, send it with an idempotency key the
// transaction wrote). Registered functions run in the order they were
// registered; a panic in one propagates from Transaction, the transaction
// being committed, and the rest do not run.
//
// Calling AfterCommit with a context that is not the one fn received, or
// after fn returned, is an error matching [ErrInvalidArgument], and fn is
// not registered.
func AfterCommit(ctx context.Context, fn func(ctx context.Context)) error {
	if fn == nil {
		return &invalidArgError{msg: "AfterCommit: nil fn"}
	}
	if ctx == nil {
		return &invalidArgError{msg: "AfterCommit: nil context"}
	}
	c := callOf(ctx)
	switch {
	case c == nil:
		return &invalidArgError{msg: "AfterCommit: ctx is not the context fn of a Transaction received"}
	case !c.inFn:
		return &invalidArgError{msg: "AfterCommit: called after fn returned; register work while fn runs"}
	}
	c.hooks = append(c.hooks, fn)
	return nil
}

// Attempt returns the number of the attempt running fn, counted from 1, for
// the context fn of a [Transaction] received (or one derived from it), and
// 0 for any other context.
func Attempt(ctx context.Context) int {
	if ctx == nil {
		return 0
	}
	if c := callOf(ctx); c != nil {
		return c.attempt
	}
	return 0
}

// isUniqueViolation reports a unique or exclusion violation that the caller
// did not mark NonRetryable.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.UniqueViolation || pgErr.Code == pgerrcode.ExclusionViolation) &&
		!errors.Is(err, errNonRetryableMarker)
}
