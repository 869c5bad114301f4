package pgtx

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// Stats is a snapshot of a [Pool]'s statistics. Counters end in Count and
// totals of time in Duration, as in [database/sql.DBStats]; the other
// fields are readings of the moment.
type Stats struct {
	// Pool is the main pool's pgxpool statistics.
	Pool *pgxpool.Stat
	// CancelPool is the cancel pool's; nil unless the [CancelMode] is
	// [CancelModePool].
	CancelPool *pgxpool.Stat
	// Cancels counts the statements cancelled because their context ended.
	Cancels CancelStats

	// Waiting is the queue depth: acquires of a connection in progress
	// now, on every path (Transaction and the pool's query methods). Above
	// 0 callers wait: the pool cannot serve the arrival rate at the
	// current query latency. Alert on it, not on utilisation.
	Waiting int64
	// AcquireWait is the distribution of Transaction's waits for a
	// connection.
	AcquireWait Histogram
	// AcquireTimeoutCount counts Transaction's waits ended by
	// [Config].AcquireTimeout.
	AcquireTimeoutCount int64
	// QueueFullCount counts calls refused at once because
	// [Config].MaxWaiters callers were waiting.
	QueueFullCount int64
	// TransactionCount counts Transaction calls started.
	TransactionCount int64
	// HeldCount and HeldDuration count the attempts that held a connection
	// and gave it back, and their total hold time (BEGIN to release):
	// HeldDuration/HeldCount is the mean time a transaction keeps a
	// connection.
	HeldCount    int64
	HeldDuration time.Duration
	// InFlight is the number of attempts holding a connection now, and
	// OldestInFlight the age of the oldest of them.
	InFlight       int
	OldestInFlight time.Duration

	// Breaker is the pool's circuit breaker; nil when it has none.
	Breaker *BreakerStats

	// Contention is the state of the contention manager
	// ([Config].Contention), one entry per label, the empty label first;
	// nil when the manager is off.
	Contention []ContentionStats

	// Resolved counts the resolutions of ambiguous COMMITs
	// ([Config].ResolveTimeout).
	Resolved ResolveStats

	// LostCommitCount counts the commits that calls reported (Transaction
	// returned nil) and that a later run of the server provably does not
	// have: a failover to an asynchronous standby, or a crash with
	// synchronous_commit off, discarded them; a [failover.Tracer] is told
	// of each. UnprovenCommitCount counts those of which the later run said
	// "committed" while nothing proved that the id had not been given again
	// there (kept or lost, nothing tells), or no longer knew the id; and
	// SurvivedCommitCount those proven kept ([Config].RecentCommits).
	LostCommitCount, UnprovenCommitCount, SurvivedCommitCount int64
}

// CancelStats counts cancellations by outcome.
type CancelStats struct {
	// SentCount counts cancels sent to the server (over the cancel pool or
	// with the protocol cancel request).
	SentCount int64
	// SignalledCount counts pg_cancel_backend calls that signalled the
	// backend.
	SignalledCount int64
	// NotFoundCount counts cancels whose backend (pid and backend_start)
	// no longer existed: nothing was signalled.
	NotFoundCount int64
	// PoolErrorCount counts cancels the cancel pool could not deliver (it
	// was busy, could not connect, was not allowed to cancel, or its answer
	// was lost); all but the last then fell back to the protocol cancel.
	PoolErrorCount int64
	// ProtocolCount counts cancels delivered with the protocol cancel
	// request, in [CancelModeProtocol] or as the fallback of
	// [CancelModePool].
	ProtocolCount int64
	// ClosedCount counts connections a cancellation destroyed: in
	// [CancelModeClose], when the cancel was not confirmed finished, when
	// the statement did not return within the grace, or when the context
	// ended before the connection was ready. Such a connection is never
	// reused.
	ClosedCount int64
	// Latency is the distribution of the time from the context's end to
	// the cancel's answer.
	Latency Histogram
}

// Histogram is a distribution of durations in fixed buckets: the one
// summary of latencies in [Stats].
type Histogram struct {
	// Count is the number of observations, Duration their total and Max the
	// longest.
	Count    int64
	Duration time.Duration
	Max      time.Duration
	// Bounds are the upper bounds of the buckets, ascending; a last bucket
	// holds what is above the last bound.
	Bounds []time.Duration
	// Buckets has one count per bucket: len(Bounds)+1.
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
// (0 < q <= 1): an estimate from above. Above the last bound it returns
// Max. It returns 0 for an empty histogram.
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
		if cp := p.cancel.Pool(); cp != nil {
			s.CancelPool = cp.Stat()
		}
	}
	return s
}

// defaultResolveTimeout bounds the resolution of an ambiguous COMMIT.
const defaultResolveTimeout = 5 * time.Second

// ResolveStats counts what became of the ambiguous COMMITs of a pool: those
// whose connection was lost, or whose session ended, while COMMIT was in
// flight ([Config].ResolveTimeout).
type ResolveStats struct {
	// CommittedCount: the server had committed; the call reported success.
	CommittedCount int64
	// AbortedCount: the server had not committed; the call was run again.
	AbortedCount int64
	// NotAppliedCount: the transaction had no id when COMMIT was sent (it
	// wrote nothing and sent no notification), or it began on a server in
	// recovery (a hot standby), where a transaction can change nothing, so
	// running it again is harmless; the call was run again.
	NotAppliedCount int64
	// LostCount counts, of AbortedCount, the transactions whose server
	// had restarted, recovered from a crash or been promoted since they
	// began, and whose id was provably not in the history it kept: its
	// WAL never had their commit.
	LostCount int64
	// UnknownCount: nothing could tell; the call returned
	// [ErrCommitUnknown]. It is the sum of the five counts of reasons
	// that follow, and the error says which.
	UnknownCount int64
	// UnsupportedCount counts the unknown outcomes of connections to
	// servers that cannot be asked (without pg_xact_status: PostgreSQL
	// before 13, CockroachDB, YugabyteDB).
	UnsupportedCount int64
	// ElsewhereCount counts the unknown outcomes whose server, when it
	// could be asked, was not the system or timeline the transaction ran
	// on: another system, an older timeline, or a standby promoted since
	// (a failover) that said "committed" with nothing to prove that the
	// id had not been given again there to another transaction.
	ElsewhereCount int64
	// RestartedCount counts the unknown outcomes whose server, on the
	// transaction's timeline, said "committed" after it had restarted or
	// recovered from a crash since the transaction began, with nothing to
	// prove that the id had not been given again to another transaction.
	RestartedCount int64
	// ForgottenCount counts the unknown outcomes whose server no longer
	// knew the id (too old).
	ForgottenCount int64
	// UnansweredCount counts the unknown outcomes with no answer within
	// ResolveTimeout: no server of the transaction's system out of
	// recovery could be reached.
	UnansweredCount int64
	// TerminatedCount counts backends ended to resolve a transaction they
	// still held open (their client gone, they had not noticed), after
	// which the server's answer was definitive.
	TerminatedCount int64
}

// resolveStats reads c into a ResolveStats.
func resolveStats(c *resolve.Counters) ResolveStats {
	return ResolveStats{
		CommittedCount: c.Committed.Load(), AbortedCount: c.Aborted.Load(), LostCount: c.Lost.Load(),
		NotAppliedCount: c.NotApplied.Load(), UnknownCount: c.Unknown.Load(),
		UnsupportedCount: c.Unsupported.Load(), ElsewhereCount: c.Elsewhere.Load(), RestartedCount: c.Restarted.Load(),
		ForgottenCount: c.Forgotten.Load(), UnansweredCount: c.Unanswered.Load(),
		TerminatedCount: c.Terminated.Load(),
	}
}
