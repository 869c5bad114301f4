package pgtx

import (
	"context"
	"sync"

	"github.com/pgtx-go/pgtx/internal/txn"
)

// attempt is the context fn receives, carrying what the call's guards
// need. Each attempt has its own, so a goroutine fn left running still sees
// its own attempt.
type attempt struct {
	context.Context
	pool   *Pool
	parent *attempt // the attempt whose fn made this call (on another pool)
	n      int

	// mu guards inFn, tx and hooks: fn's goroutines may call AfterCommit.
	mu    sync.Mutex
	inFn  bool    // fn is running
	tx    *txn.Tx // fn's while it runs, for the deferred package
	hooks []func(context.Context)
}

// setInFn says whether fn is running on t, for AfterCommit and the
// deferred package.
func (a *attempt) setInFn(in bool, t *txn.Tx) {
	a.mu.Lock()
	a.inFn, a.tx = in, t
	a.mu.Unlock()
}

// attemptKey is the context key under which an attempt finds itself.
type attemptKey struct{}

// Value makes the attempt findable from any context derived from it.
func (a *attempt) Value(key any) any {
	switch key {
	case attemptKey{}:
		return a
	case txn.RunningKey{}:
		a.mu.Lock()
		defer a.mu.Unlock()
		if !a.inFn {
			return (*txn.Tx)(nil)
		}
		return a.tx
	}
	return a.Context.Value(key)
}

// attemptOf returns the innermost attempt ctx is inside, or nil.
func attemptOf(ctx context.Context) *attempt {
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	return a
}

// inside reports whether a, or an attempt whose fn made its call, runs on
// pool.
func (a *attempt) inside(pool *Pool) bool {
	for ; a != nil; a = a.parent {
		if a.pool == pool {
			return true
		}
	}
	return false
}

// afterCommit runs the work AfterCommit registered, once.
func (a *attempt) afterCommit(ctx context.Context) {
	a.mu.Lock()
	hooks := a.hooks
	a.hooks = nil
	a.mu.Unlock()
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
	a := attemptOf(ctx)
	if a == nil {
		return invalidArg("AfterCommit: ctx is not the context fn of a Transaction received")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.inFn {
		return invalidArg("AfterCommit: called after fn returned; register work while fn runs")
	}
	a.hooks = append(a.hooks, fn)
	return nil
}

// Attempt returns the number of the attempt running fn, counted from 1, for
// the context fn of a [Transaction] received (or one derived from it), and
// 0 for any other.
func Attempt(ctx context.Context) int {
	if ctx == nil {
		return 0
	}
	if a := attemptOf(ctx); a != nil {
		return a.n
	}
	return 0
}
