package pgtx

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// attempt is the context fn receives: the attempt's context, which also
// carries what the call's guards need: the pool (to refuse a nested call),
// the attempt's number, and the work it registered to run after the commit.
// Each attempt has its own, so a goroutine fn left running still sees its
// own attempt; the first is part of the call's call and costs no
// allocation.
type attempt struct {
	context.Context
	pool   *Pool
	parent *attempt // the attempt whose fn made this call (on another pool)
	n      int

	// mu guards inFn and hooks: fn's goroutines may call AfterCommit.
	mu    sync.Mutex
	inFn  bool // fn is running
	hooks []func(context.Context)
}

// setInFn records that fn runs, or has returned.
func (c *attempt) setInFn(in bool) {
	c.mu.Lock()
	c.inFn = in
	c.mu.Unlock()
}

// callKey is the context key of an attempt.
type callKey struct{}

// Value returns the attempt for callKey, and otherwise asks the attempt's
// context.
func (c *attempt) Value(key any) any {
	if key == (callKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// attemptOf returns the innermost attempt ctx is inside, or nil.
func attemptOf(ctx context.Context) *attempt {
	c, _ := ctx.Value(callKey{}).(*attempt)
	return c
}

// inside reports whether the attempt or one of its parents runs on pool.
func (c *attempt) inside(pool *Pool) bool {
	for ; c != nil; c = c.parent {
		if c.pool == pool {
			return true
		}
	}
	return false
}

// afterCommit runs the work the committed attempt registered, in order,
// once.
func (c *attempt) afterCommit(ctx context.Context) {
	c.mu.Lock()
	hooks := c.hooks
	c.hooks = nil
	c.mu.Unlock()
	for _, h := range hooks {
		h(ctx)
	}
}

// AfterCommit registers fn to run once the transaction whose fn received ctx
// has committed: exactly once, after COMMIT succeeded (or a lost COMMIT was
// resolved as committed) and the connection went back to the pool, in the
// order registered, with the call's own context, before [Transaction]
// returns nil. Work registered by an attempt that rolled back or was
// retried is dropped with it, so an HTTP call or a message registered here
// happens once however often fn ran. When the call fails, fn is not run,
// [ErrCommitUnknown] included: the caller, who sees that error, decides. A
// panic in one propagates from Transaction, the transaction committed.
//
// AfterCommit may be called from goroutines fn started, while fn runs.
// Called with another context, or after fn returned, it returns an error
// matching [ErrInvalidArgument] and registers nothing.
func AfterCommit(ctx context.Context, fn func(ctx context.Context)) error {
	if fn == nil {
		return &invalidArgError{Msg: "AfterCommit: nil fn"}
	}
	if ctx == nil {
		return &invalidArgError{Msg: "AfterCommit: nil context"}
	}
	c := attemptOf(ctx)
	if c == nil {
		return &invalidArgError{Msg: "AfterCommit: ctx is not the context fn of a Transaction received"}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.inFn {
		return &invalidArgError{Msg: "AfterCommit: called after fn returned; register work while fn runs"}
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
	if c := attemptOf(ctx); c != nil {
		return c.n
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
