package acquire

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// How an acquireCtx ended.
const (
	endedNot     = iota
	endedTimeout // the acquire timeout passed
	endedParent  // the caller's context ended
)

// acquireCtx is the context of a bounded acquire: it ends when the acquire
// timeout passes or the caller's context ends, and carries the caller's
// values. Unlike a context from context.WithTimeout it is kept for the next
// acquire, with its channel and timer, when it did not end and nothing can
// still hold it. An acquire that opened a connection, or that ran a hook of
// the caller's (PrepareConn, BeforeAcquire, ShouldPing, an AcquireTracer),
// handed it to code that may keep it or a context derived from it, and the
// context package's own goroutine for such a derived context asks it for
// its cause later.
// Such a context is marked shared ([MarkShared]) and left to the garbage
// collector, its caller's context still in place.
type acquireCtx struct {
	parent   context.Context
	deadline time.Time
	done     chan struct{}
	timer    *time.Timer
	// stopParent unregisters the context.AfterFunc on the caller's context;
	// nil when that context cannot be cancelled.
	stopParent func() bool
	// ended says how the context ended; it is set before done is closed,
	// so Err is never nil once Done is seen closed.
	ended atomic.Int32
	// shared is set when the context was handed to code that may keep it.
	shared atomic.Bool
}

// acquireCtxKey is the key under which an acquireCtx answers Value with
// itself, so that a hook given a context derived from it can find it.
type acquireCtxKey struct{}

// MarkShared marks the acquire context that ctx is, or is derived from, as
// handed to code that may keep it (a connect, a hook of the caller's), so
// it is not reused. On any other context it does nothing.
func MarkShared(ctx context.Context) {
	if c, ok := ctx.Value(acquireCtxKey{}).(*acquireCtx); ok {
		c.shared.Store(true)
	}
}

// Deadline returns when the acquire timeout passes: [Queue.Acquire] uses an
// acquireCtx only when the caller's deadline, if any, comes later.
func (c *acquireCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Done is closed when the acquire timeout passes or the caller's context
// ends.
func (c *acquireCtx) Done() <-chan struct{} { return c.done }

// Err returns context.DeadlineExceeded once the acquire timeout has passed,
// the caller's context's error once that has ended, and nil before.
func (c *acquireCtx) Err() error {
	switch c.ended.Load() {
	case endedTimeout:
		return context.DeadlineExceeded
	case endedParent:
		return c.parent.Err()
	}
	return nil
}

// Value returns the caller's value for key.
func (c *acquireCtx) Value(key any) any {
	if _, ok := key.(acquireCtxKey); ok {
		return c
	}
	return c.parent.Value(key)
}

func (c *acquireCtx) end(how int32) {
	if c.ended.CompareAndSwap(endedNot, how) {
		close(c.done)
	}
}

func (c *acquireCtx) expire()      { c.end(endedTimeout) }
func (c *acquireCtx) parentEnded() { c.end(endedParent) }

// acquireCtxPool keeps the acquire contexts that did not end, for reuse.
type acquireCtxPool struct{ p sync.Pool }

// get returns an acquireCtx of parent, armed to end timeout from now.
func (ap *acquireCtxPool) get(parent context.Context, timeout time.Duration) *acquireCtx {
	c, _ := ap.p.Get().(*acquireCtx)
	if c == nil {
		c = &acquireCtx{done: make(chan struct{})}
	}
	c.parent, c.deadline = parent, time.Now().Add(timeout)
	if c.timer == nil {
		c.timer = time.AfterFunc(timeout, c.expire)
	} else {
		c.timer.Reset(timeout)
	}
	if parent.Done() != nil {
		c.stopParent = context.AfterFunc(parent, c.parentEnded)
	}
	return c
}

// put disarms c and keeps it if neither its timer nor its caller's context
// had ended it and it was not shared: an ended context cannot be reopened,
// and a shared one may still be looked at; both are left to the garbage
// collector as they are.
func (ap *acquireCtxPool) put(c *acquireCtx) {
	live := c.timer.Stop()
	if c.stopParent != nil {
		live = c.stopParent() && live
		c.stopParent = nil
	}
	if !live || c.ended.Load() != endedNot || c.shared.Load() {
		return
	}
	c.parent = nil
	ap.p.Put(c)
}
