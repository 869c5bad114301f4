package pgtx

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrQueueFull is matched (errors.Is) by the error [Transaction] returns at
// once, without waiting, when Config.MaxWaiters callers already wait for a
// connection of the pool. It is not retried: it is the pool shedding load.
var ErrQueueFull = errors.New("pgtx: too many callers waiting for a pool connection")

// queue is what a Pool knows about the wait for its connections and the
// transactions that hold them: pgxpool counts neither waiters nor hold times.
type queue struct {
	// waiters counts acquires in progress on every path (Transaction and
	// the pool's query methods), through pgxpool's acquire tracer.
	waiters    atomic.Int64
	maxWaiters int64 // 0: unbounded
	// reserved counts Transaction's callers holding a place in the queue
	// (MaxWaiters).
	reserved atomic.Int64

	acquireWait     histogram // Transaction's acquires
	acquireTimeouts atomic.Int64
	queueFull       atomic.Int64

	calls    atomic.Int64 // Transaction calls started
	held     atomic.Int64 // attempts that held a connection and released it
	holdTime atomic.Int64 // their total hold time, in nanoseconds

	inflight inflightSet
}

// poolTracer is installed as the pgxpool's tracer to count waiters. It is
// taken off every connection again in BeforeConnect, so queries pay nothing
// for it; the caller's tracer, if any, keeps receiving everything.
type poolTracer struct {
	q           *queue
	user        pgx.QueryTracer
	userAcquire pgxpool.AcquireTracer
	userRelease pgxpool.ReleaseTracer
}

func newPoolTracer(q *queue, user pgx.QueryTracer) *poolTracer {
	t := &poolTracer{q: q, user: user}
	t.userAcquire, _ = user.(pgxpool.AcquireTracer)
	t.userRelease, _ = user.(pgxpool.ReleaseTracer)
	return t
}

// TraceQueryStart and TraceQueryEnd only make poolTracer a pgx.QueryTracer,
// which ConnConfig.Tracer must be; connections never call them (see
// installHooks).
func (t *poolTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (t *poolTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *poolTracer) TraceAcquireStart(ctx context.Context, p *pgxpool.Pool, d pgxpool.TraceAcquireStartData) context.Context {
	t.q.waiters.Add(1)
	if t.userAcquire != nil {
		markShared(ctx)
		ctx = t.userAcquire.TraceAcquireStart(ctx, p, d)
	}
	return ctx
}

func (t *poolTracer) TraceAcquireEnd(ctx context.Context, p *pgxpool.Pool, d pgxpool.TraceAcquireEndData) {
	t.q.waiters.Add(-1)
	if t.userAcquire != nil {
		t.userAcquire.TraceAcquireEnd(ctx, p, d)
	}
}

func (t *poolTracer) TraceRelease(p *pgxpool.Pool, d pgxpool.TraceReleaseData) {
	if t.userRelease != nil {
		t.userRelease.TraceRelease(p, d)
	}
}

// inflightSet records when each attempt holding a connection started, in a
// slot it keeps until release, so the oldest can be found without
// allocating per transaction.
type inflightSet struct {
	mu     sync.Mutex
	starts []int64 // unix nanoseconds; 0 = free slot
	free   []int
}

// add records a start and returns its slot.
func (s *inflightSet) add(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.free); n > 0 {
		slot := s.free[n-1]
		s.free = s.free[:n-1]
		s.starts[slot] = now.UnixNano()
		return slot
	}
	s.starts = append(s.starts, now.UnixNano())
	return len(s.starts) - 1
}

// remove frees a slot.
func (s *inflightSet) remove(slot int) {
	s.mu.Lock()
	s.starts[slot] = 0
	s.free = append(s.free, slot)
	s.mu.Unlock()
}

// snapshot returns how many attempts hold a connection and the age of the
// oldest.
func (s *inflightSet) snapshot(now time.Time) (n int, oldest time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.starts {
		if st == 0 {
			continue
		}
		n++
		if age := time.Duration(now.UnixNano() - st); age > oldest {
			oldest = age
		}
	}
	return n, oldest
}
