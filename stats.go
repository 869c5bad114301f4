package pgtx

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/resolve"
	"github.com/pgtx-go/pgtx/slots"
)

// Stats is a snapshot of a [Pool]'s statistics. Counters end in Count and
// totals of time in Duration, as in [database/sql.DBStats].
type Stats struct {
	// Pool is the main pool's pgxpool statistics.
	Pool *pgxpool.Stat
	// CancelPool is the cancel pool's; nil outside [CancelModePool].
	CancelPool *pgxpool.Stat
	// Cancels counts the statements cancelled because their context ended.
	Cancels CancelStats

	// Waiting is the queue depth: acquires of a connection in progress
	// now, on every path. Alert on it, not on utilisation.
	Waiting int64
	// AcquireWait is the distribution of Transaction's connection waits.
	AcquireWait Histogram
	// AcquireTimeoutCount counts waits ended by [Config].AcquireTimeout.
	AcquireTimeoutCount int64
	// QueueFullCount counts calls refused by [Config].MaxWaiters.
	QueueFullCount int64
	// TransactionCount counts Transaction calls started.
	TransactionCount int64
	// HeldCount counts attempts that held a connection; HeldDuration, their total.
	HeldCount    int64
	HeldDuration time.Duration
	// InFlight counts attempts holding a connection; OldestInFlight is
	// the oldest one's age.
	InFlight       int
	OldestInFlight time.Duration

	// Slots is what the pool learned of the server's connection slots, and
	// CancelSlots what the cancel pool did (zero outside
	// [CancelModePool]). See docs/fleets.md.
	Slots, CancelSlots slots.Stats

	// Breaker is the pool's circuit breaker; nil when it has none.
	Breaker *BreakerStats

	// Contention has one entry per label, the empty label first; nil when off.
	Contention []ContentionStats

	// Resolved counts the resolutions of ambiguous COMMITs.
	Resolved ResolveStats

	// LostCommitCount counts reported commits a later run of the server
	// provably lacks, UnprovenCommitCount those nothing tells of, and
	// SurvivedCommitCount those proven kept. See docs/lost-commits.md.
	LostCommitCount, UnprovenCommitCount, SurvivedCommitCount int64
}

// CancelStats counts cancellations by outcome.
type CancelStats struct {
	// SentCount counts cancels sent to the server.
	SentCount int64
	// SignalledCount counts backends pg_cancel_backend signalled.
	SignalledCount int64
	// NotFoundCount counts cancels whose backend no longer existed.
	NotFoundCount int64
	// PoolErrorCount counts cancels the cancel pool could not deliver.
	PoolErrorCount int64
	// ProtocolCount counts cancels delivered as protocol cancel requests.
	ProtocolCount int64
	// ClosedCount counts connections a cancellation closed.
	ClosedCount int64
	// Latency runs from the context's end to the cancel's answer.
	Latency Histogram
}

// Histogram is a distribution of durations in fixed buckets.
type Histogram struct {
	// Count is the number of observations, Duration their total, Max the longest.
	Count    int64
	Duration time.Duration
	Max      time.Duration
	// Bounds are the buckets' upper bounds, ascending.
	Bounds []time.Duration
	// Buckets has len(Bounds)+1 counts, the last above the last bound.
	Buckets []int64
}

// Mean returns Duration / Count, or 0 when Count is 0.
func (h Histogram) Mean() time.Duration {
	if h.Count == 0 {
		return 0
	}
	return h.Duration / time.Duration(h.Count)
}

// Quantile returns the upper bound of the bucket that holds the q-quantile
// (0 < q <= 1), or Max above the last bound; 0 for an empty histogram.
func (h Histogram) Quantile(q float64) time.Duration {
	if h.Count == 0 || len(h.Buckets) != len(h.Bounds)+1 {
		return 0
	}
	rank := int64(q*float64(h.Count) + 0.5)
	rank = max(rank, 1)
	var seen int64
	for i, c := range h.Buckets {
		seen += c
		if seen >= rank {
			if i < len(h.Bounds) {
				return h.Bounds[i]
			}
			break
		}
	}
	return max(h.Max, h.Bounds[len(h.Bounds)-1])
}

// Stats returns a snapshot of the pool's statistics.
func (p *Pool) Stats() Stats {
	if p == nil || p.pool == nil || p.queue == nil { // a Pool not made by New or NewWithConfig
		return Stats{}
	}
	q := p.queue
	c := q.Counts()
	s := Stats{
		Pool:                p.pool.Stat(),
		Waiting:             c.Waiting,
		AcquireWait:         Histogram(q.acquireWait.Snapshot()),
		AcquireTimeoutCount: c.Timeouts,
		QueueFullCount:      c.Full,
		TransactionCount:    q.calls.Load(),
		Resolved:            resolveStats(&p.resolved),
		Slots:               slotStats(p.slots.limit),
	}
	s.HeldCount, s.HeldDuration = q.inflight.Held()
	s.InFlight, s.OldestInFlight = q.inflight.Snapshot(time.Now())
	if p.contention != nil {
		s.Contention = contentionStats(p.contention)
	}
	if p.acked != nil {
		ackedStats(p.acked, &s)
	}
	if p.breaker != nil {
		bs := p.breaker.stats()
		s.Breaker = &bs
	}
	if p.cancel != nil {
		s.Cancels = cancelStats(p.cancel)
		if cp := p.cancel.Limited(); cp != nil {
			s.CancelPool = cp.Pool.Stat()
			s.CancelSlots = slotStats(cp.Limit)
		}
	}
	return s
}

// ResolveStats counts the resolutions of a pool's ambiguous COMMITs, and
// what they found. With ResolveTimeout -1 nothing is resolved and every
// count stays 0, although each lost COMMIT ends its call with
// [ErrCommitUnknown]. See docs/ambiguous-commits.md.
type ResolveStats struct {
	// CommittedCount: the server had committed; the call reported success.
	CommittedCount int64
	// AbortedCount: the server had not committed; the call was run again.
	AbortedCount int64
	// NotAppliedCount: it provably changed nothing; the call was run again.
	NotAppliedCount int64
	// LostCount counts, of AbortedCount, commits a restart or failover lost.
	LostCount int64
	// UnknownCount: the resolution could not tell, and the call returned
	// [ErrCommitUnknown]; the sum of the five counts that follow. A lost
	// COMMIT that no resolution was asked about (ResolveTimeout -1) is not
	// counted.
	UnknownCount int64
	// UnsupportedCount: the server cannot be asked (no pg_xact_status).
	UnsupportedCount int64
	// ElsewhereCount: the server asked was not on the transaction's
	// system or timeline, or was promoted since, and proved nothing.
	ElsewhereCount int64
	// RestartedCount: the server had restarted and proved nothing.
	RestartedCount int64
	// ForgottenCount: the server no longer knew the id.
	ForgottenCount int64
	// UnansweredCount: no server answered within ResolveTimeout.
	UnansweredCount int64
	// TerminatedCount counts backends ended to resolve a transaction they held.
	TerminatedCount int64
}

func resolveStats(c *resolve.Counters) ResolveStats {
	return ResolveStats{
		CommittedCount: c.Committed.Load(), AbortedCount: c.Aborted.Load(), LostCount: c.Lost.Load(),
		NotAppliedCount: c.NotApplied.Load(), UnknownCount: c.Unknown.Load(),
		UnsupportedCount: c.Unsupported.Load(), ElsewhereCount: c.Elsewhere.Load(), RestartedCount: c.Restarted.Load(),
		ForgottenCount: c.Forgotten.Load(), UnansweredCount: c.Unanswered.Load(),
		TerminatedCount: c.Terminated.Load(),
	}
}
