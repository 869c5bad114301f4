package acquire

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Pool is what an acquire takes a connection from: a *pgxpool.Pool, or a
// fake in tests.
type Pool interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// Clock tells when an acquire starts and ends, to measure the wait.
type Clock interface {
	Now() time.Time
}

// Bounds are the limits of a [Queue], resolved by its owner (defaults
// applied).
type Bounds struct {
	// Timeout bounds each wait beside the caller's context; 0 or less:
	// only the caller's context does.
	Timeout time.Duration
	// MaxWaiters is how many callers of [Queue.Acquire] may wait at once;
	// 0 or less: any number.
	MaxWaiters int
}

var (
	// ErrTimeout is returned by [Queue.Acquire] when [Bounds].Timeout,
	// not the caller's context, ended the wait. It is a sentinel, not a
	// context error, so that its owner can tell it from the caller's own
	// deadline and say so.
	ErrTimeout = errors.New("acquire: timed out waiting for a pool connection")
	// ErrFull is returned by [Queue.Acquire] at once, without waiting,
	// when [Bounds].MaxWaiters callers already wait.
	ErrFull = errors.New("acquire: too many callers waiting for a pool connection")
)

// Queue is the wait for a pool's connections: it bounds each acquire, and
// counts the callers waiting, those the timeout ended and those refused.
// Its zero value has no bounds; [Queue.Init] sets them before first use.
// It is safe for concurrent use.
type Queue struct {
	bounds     Bounds
	maxWaiters int64 // 0: unbounded
	// waiters counts acquires in progress on every path that goes through
	// the pool (Acquire and any other), through the pool's [Tracer].
	waiters atomic.Int64
	// reserved counts Acquire's callers holding a place in the queue.
	reserved atomic.Int64
	timeouts atomic.Int64
	full     atomic.Int64
	// ctxs are the reusable contexts of bounded acquires.
	ctxs acquireCtxPool
}

// Init sets q's bounds.
func (q *Queue) Init(b Bounds) {
	q.bounds = b
	q.maxWaiters = int64(max(b.MaxWaiters, 0))
}

// Bounds returns the bounds q was set up with.
func (q *Queue) Bounds() Bounds { return q.bounds }

// Counts are a snapshot of a [Queue]'s counters.
type Counts struct {
	// Waiting is how many acquires are in progress, counted by the pool's
	// [Tracer] on every path.
	Waiting int64
	// Timeouts is how many [Queue.Acquire] calls ended with [ErrTimeout].
	Timeouts int64
	// Full is how many [Queue.Acquire] calls were refused with [ErrFull].
	Full int64
}

// Counts returns q's counters.
func (q *Queue) Counts() Counts {
	return Counts{Waiting: q.waiters.Load(), Timeouts: q.timeouts.Load(), Full: q.full.Load()}
}

// Acquire takes a connection from pool, waiting at most the acquire
// timeout, and returns it with the time the wait ended and how long it
// took. When that timeout (not ctx) ends the wait, the error is
// [ErrTimeout]; when the caller's context ends it, the pool's error for
// it; when MaxWaiters callers already wait, it fails at once with
// [ErrFull], and returns no time.
func (q *Queue) Acquire(ctx context.Context, pool Pool, clk Clock) (conn *pgxpool.Conn, end time.Time, waited time.Duration, err error) {
	if q.maxWaiters > 0 {
		// Reserve a place in the queue before waiting, so that callers
		// arriving together cannot all pass a check made before any of them
		// is counted.
		if q.reserved.Add(1) > q.maxWaiters {
			q.reserved.Add(-1)
			q.full.Add(1)
			return nil, time.Time{}, 0, ErrFull
		}
		defer q.reserved.Add(-1)
	}
	start := clk.Now()
	conn, err = q.bounded(ctx, pool, start)
	end = clk.Now()
	if err == ErrTimeout {
		q.timeouts.Add(1)
	}
	return conn, end, end.Sub(start), err
}

// bounded waits for a connection until ctx ends or the acquire timeout
// passes, whichever comes first. When the caller's deadline comes no later
// than the acquire timeout, ctx as it is bounds the wait, and its error is
// the one to return. Otherwise the wait gets an acquireCtx, reused from one
// acquire to the next instead of a context.WithTimeout made for each.
func (q *Queue) bounded(ctx context.Context, pool Pool, now time.Time) (*pgxpool.Conn, error) {
	timeout := q.bounds.Timeout
	if timeout <= 0 {
		return pool.Acquire(ctx)
	}
	if d, ok := ctx.Deadline(); ok && !d.After(now.Add(timeout)) {
		return pool.Acquire(ctx)
	}
	actx := q.ctxs.get(ctx, timeout)
	conn, err := pool.Acquire(actx)
	timedOut := actx.ended.Load() == endedTimeout
	q.ctxs.put(actx)
	if err != nil && timedOut && ctx.Err() == nil {
		return nil, ErrTimeout
	}
	return conn, err
}
