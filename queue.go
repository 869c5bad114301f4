package pgtx

import (
	"errors"
	"sync/atomic"

	"github.com/pgtx-go/pgtx/internal/acquire"
	"github.com/pgtx-go/pgtx/internal/histogram"
)

// ErrQueueFull is matched (errors.Is) by the error [Transaction] returns at
// once, without waiting, when Config.MaxWaiters callers already wait for a
// connection of the pool. It is not retried: it is the pool shedding load.
var ErrQueueFull = errors.New("pgtx: too many callers waiting for a pool connection")

// queue is what a Pool knows about the wait for its connections and the
// transactions that hold them: pgxpool counts neither waiters nor hold times.
type queue struct {
	// Queue bounds Transaction's acquires and counts the waiters on every
	// path (Transaction and the pool's query methods), through the tracer
	// hooks.Install gives the pgxpool.
	acquire.Queue
	inflight    acquire.InFlight // attempts holding a connection
	acquireWait histogram.Live   // Transaction's acquires
	calls       atomic.Int64     // Transaction calls started
}

// newQueue returns the queue of a pool made from cfg, its bounds resolved.
func newQueue(cfg *Config) *queue {
	q := &queue{}
	q.Init(acquire.Bounds{
		Timeout:    defaultOrNone(cfg.AcquireTimeout, defaultAcquireTimeout),
		MaxWaiters: cfg.MaxWaiters,
	})
	return q
}
