package pgtx

import (
	"context"
	"sync"
)

// attempt is the context fn receives, carrying what the call's guards
// need. Each attempt has its own, so a goroutine fn left running still sees
// its own attempt.
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

func (c *attempt) setInFn(in bool) {
	c.mu.Lock()
	c.inFn = in
	c.mu.Unlock()
}

type callKey struct{}

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

func (c *attempt) inside(pool *Pool) bool {
	for ; c != nil; c = c.parent {
		if c.pool == pool {
			return true
		}
	}
	return false
}

func (c *attempt) afterCommit(ctx context.Context) {
	c.mu.Lock()
	hooks := c.hooks
	c.hooks = nil
	c.mu.Unlock()
	for _, h := range hooks {
		h(ctx)
	}
}

// AfterCommit registers fn to run exactly once after the transaction whose
// fn received ctx has committed and released its connection, in the order
// registered, before [Transaction] returns nil. Work of an attempt that was
// retried is dropped with it; when the call fails ([ErrCommitUnknown]
// included), fn is not run.
//
// AfterCommit may be called from goroutines fn started, while fn runs.
// Called with another context, or after fn returned, it returns an error
// matching [ErrInvalidArgument]. See docs/retries.md.
func AfterCommit(ctx context.Context, fn func(ctx context.Context)) error {
	if fn == nil {
		return invalidArg("AfterCommit: nil fn")
	}
	if ctx == nil {
		return invalidArg("AfterCommit: nil context")
	}
	c := attemptOf(ctx)
	if c == nil {
		return invalidArg("AfterCommit: ctx is not the context fn of a Transaction received")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.inFn {
		return invalidArg("AfterCommit: called after fn returned; register work while fn runs")
	}
	c.hooks = append(c.hooks, fn)
	return nil
}

// Attempt returns the number of the attempt running fn, counted from 1, for
// the context fn of a [Transaction] received (or one derived from it), and
// 0 for any other.
func Attempt(ctx context.Context) int {
	if ctx == nil {
		return 0
	}
	if c := attemptOf(ctx); c != nil {
		return c.n
	}
	return 0
}
