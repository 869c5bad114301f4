package pgtx

import (
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Stats is a snapshot of a Pool's statistics.
type Stats struct {
	// Pool is the main pool's pgxpool statistics.
	Pool *pgxpool.Stat
	// CancelPool is the cancel pool's; nil unless CancelMode is
	// CancelModePool.
	CancelPool *pgxpool.Stat
	// Cancels counts the statements cancelled because their context ended.
	Cancels CancelStats

	// Waiters is the queue depth: acquires of a connection in progress now,
	// on every path (Transaction and the pool's query methods). Above 0
	// callers wait: the pool cannot serve the arrival rate at the current
	// query latency. Alert on it, not on utilisation.
	Waiters int64
	// AcquireWait is the distribution of Transaction's waits for a
	// connection.
	AcquireWait Histogram
	// AcquireTimeouts counts Transaction's waits ended by AcquireTimeout.
	AcquireTimeouts int64
	// QueueFull counts calls refused at once because MaxWaiters callers
	// were waiting.
	QueueFull int64
	// Calls counts Transaction calls started.
	Calls int64
	// Held and HoldTime count the attempts that held a connection and gave
	// it back, and their total hold time (BEGIN to release): HoldTime/Held is
	// the mean time a transaction keeps a connection.
	Held     int64
	HoldTime time.Duration
	// InFlight is the number of attempts holding a connection now, and
	// OldestInFlight the age of the oldest of them.
	InFlight       int
	OldestInFlight time.Duration

	// Breaker is the pool's circuit breaker; nil when it has none.
	Breaker *BreakerStats

	// Resolved counts the resolutions of ambiguous COMMITs
	// (Config.ResolveCommits).
	Resolved ResolveStats
}

// CancelStats counts cancellations by outcome.
type CancelStats struct {
	// Sent counts cancels sent to the server (over the cancel pool or with
	// the protocol cancel request).
	Sent int64
	// Signalled counts pg_cancel_backend calls that signalled the backend.
	Signalled int64
	// NotFound counts cancels whose backend (pid and backend_start) no
	// longer existed: nothing was signalled.
	NotFound int64
	// PoolErrors counts cancels the cancel pool could not deliver (it was
	// busy, could not connect, was not allowed to cancel, or its answer was
	// lost); all but the last then fell back to the protocol cancel.
	PoolErrors int64
	// Protocol counts cancels delivered with the protocol cancel request,
	// in CancelModeProtocol or as the fallback of CancelModePool.
	Protocol int64
	// Closed counts connections a cancellation destroyed: in
	// CancelModeClose, when the cancel was not confirmed finished, when the
	// statement did not return within the grace, or when the context ended
	// before the connection was ready. Such a connection is never reused.
	Closed int64
	// Latency is the time from the context's end to the cancel's answer.
	Latency LatencyStats
}

// LatencyStats summarises durations.
type LatencyStats struct {
	Count int64
	Total time.Duration
	Max   time.Duration
}

// Mean returns Total / Count, or 0 when Count is 0.
func (l LatencyStats) Mean() time.Duration {
	if l.Count == 0 {
		return 0
	}
	return l.Total / time.Duration(l.Count)
}

// latencyCounter accumulates a LatencyStats without locks.
type latencyCounter struct {
	count, total, max atomic.Int64
}

func (l *latencyCounter) observe(d time.Duration) {
	l.count.Add(1)
	l.total.Add(int64(d))
	for {
		m := l.max.Load()
		if int64(d) <= m || l.max.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

func (l *latencyCounter) snapshot() LatencyStats {
	return LatencyStats{Count: l.count.Load(), Total: time.Duration(l.total.Load()), Max: time.Duration(l.max.Load())}
}

// cancelCounters is the live form of CancelStats.
type cancelCounters struct {
	sent, signalled, notFound, poolErrors, protocol, closed atomic.Int64
	latency                                                 latencyCounter
}

func (c *cancelCounters) snapshot() CancelStats {
	return CancelStats{
		Sent: c.sent.Load(), Signalled: c.signalled.Load(), NotFound: c.notFound.Load(),
		PoolErrors: c.poolErrors.Load(), Protocol: c.protocol.Load(), Closed: c.closed.Load(),
		Latency: c.latency.snapshot(),
	}
}

// Stats returns a snapshot of the pool's statistics.
func (p *Pool) Stats() Stats {
	if p == nil || p.Pool == nil || p.queue == nil { // a Pool not made by New or NewWithConfig
		return Stats{}
	}
	q := p.queue
	s := Stats{
		Pool:            p.Pool.Stat(),
		Waiters:         q.waiters.Load(),
		AcquireWait:     q.acquireWait.snapshot(),
		AcquireTimeouts: q.acquireTimeouts.Load(),
		QueueFull:       q.queueFull.Load(),
		Calls:           q.calls.Load(),
		Held:            q.held.Load(),
		HoldTime:        time.Duration(q.holdTime.Load()),
		Resolved:        p.resolved.snapshot(),
	}
	s.InFlight, s.OldestInFlight = q.inflight.snapshot(time.Now())
	if p.breaker != nil {
		bs := p.breaker.Stats()
		s.Breaker = &bs
	}
	if p.cancel != nil {
		s.Cancels = p.cancel.stats.snapshot()
		if p.cancel.pool != nil {
			s.CancelPool = p.cancel.pool.Stat()
		}
	}
	return s
}
