package pgtxslog

import (
	"log/slog"
	"time"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/slots"
	"github.com/pgtx-go/pgtx/storm"
)

// Stats returns a [slog.LogValuer] of a pool's statistics, as a compact
// group:
//
//	waiting, in_flight, oldest_in_flight   the queue and the attempts holding a connection now
//	conns {acquired, idle, total, max}     the main pool's connections (when s.Pool is set)
//	acquire_wait {count, mean, p99, max}   Transaction's waits for a connection
//	acquire_timeouts, queue_full           waits ended by AcquireTimeout, calls refused by MaxWaiters
//	transactions, held, held_mean          calls started, attempts that held a connection, mean hold
//	cancels {sent, signalled, not_found, pool_errors, protocol, closed, latency_p99}
//	resolved {committed, aborted, lost, not_applied, unknown, unsupported, elsewhere, restarted, forgotten, unanswered, terminated}
//	commits {lost, unproven, survived}     reported commits a later run of the server was asked about
//	breaker {name, state, calls, failures, slow, rejected, opened}
//	contention {<label> {limit, running, waiting}}
//	slots, cancel_slots {refused, limit, probes, raised, waits, wait}
//
// cancels, resolved and commits are left out while all their counts are 0,
// breaker when the pool has none (name when it is empty), and contention
// while the contention manager limits no label, slots and cancel_slots
// while the pool's or the cancel pool's slot counts are all 0 (the server
// never refused it for lack of slots); a label's group lists only
// the labels it limits, the empty label under the key "_". The p99 figures
// are estimates from above ([pgtx.Histogram.Quantile]). The group is built
// only when a line is written:
//
//	logger.Info("pool", "stats", pgtxslog.Stats(pool.Stats()))
func Stats(s pgtx.Stats) slog.LogValuer { return statsValue(s) }

type statsValue pgtx.Stats

// LogValue returns the group documented at [Stats].
func (s statsValue) LogValue() slog.Value {
	attrs := make([]slog.Attr, 0, 18)
	attrs = append(attrs,
		slog.Int64("waiting", s.Waiting),
		slog.Int("in_flight", s.InFlight),
		slog.Duration("oldest_in_flight", s.OldestInFlight))
	if p := s.Pool; p != nil {
		attrs = append(attrs, slog.Group("conns",
			slog.Int64("acquired", int64(p.AcquiredConns())),
			slog.Int64("idle", int64(p.IdleConns())),
			slog.Int64("total", int64(p.TotalConns())),
			slog.Int64("max", int64(p.MaxConns()))))
	}
	attrs = append(attrs,
		slog.Group("acquire_wait",
			slog.Int64("count", s.AcquireWait.Count),
			slog.Duration("mean", s.AcquireWait.Mean()),
			slog.Duration("p99", s.AcquireWait.Quantile(0.99)),
			slog.Duration("max", s.AcquireWait.Max)),
		slog.Int64("acquire_timeouts", s.AcquireTimeoutCount),
		slog.Int64("queue_full", s.QueueFullCount),
		slog.Int64("transactions", s.TransactionCount),
		slog.Int64("held", s.HeldCount),
		slog.Duration("held_mean", heldMean(s.HeldDuration, s.HeldCount)))
	if c := s.Cancels; c.SentCount|c.SignalledCount|c.NotFoundCount|c.PoolErrorCount|c.ProtocolCount|c.ClosedCount != 0 {
		attrs = append(attrs, slog.Group("cancels",
			slog.Int64("sent", c.SentCount),
			slog.Int64("signalled", c.SignalledCount),
			slog.Int64("not_found", c.NotFoundCount),
			slog.Int64("pool_errors", c.PoolErrorCount),
			slog.Int64("protocol", c.ProtocolCount),
			slog.Int64("closed", c.ClosedCount),
			slog.Duration("latency_p99", c.Latency.Quantile(0.99))))
	}
	if r := s.Resolved; r != (pgtx.ResolveStats{}) {
		attrs = append(attrs, slog.Group("resolved",
			slog.Int64("committed", r.CommittedCount),
			slog.Int64("aborted", r.AbortedCount),
			slog.Int64("lost", r.LostCount),
			slog.Int64("not_applied", r.NotAppliedCount),
			slog.Int64("unknown", r.UnknownCount),
			slog.Int64("unsupported", r.UnsupportedCount),
			slog.Int64("elsewhere", r.ElsewhereCount),
			slog.Int64("restarted", r.RestartedCount),
			slog.Int64("forgotten", r.ForgottenCount),
			slog.Int64("unanswered", r.UnansweredCount),
			slog.Int64("terminated", r.TerminatedCount)))
	}
	if s.LostCommitCount|s.UnprovenCommitCount|s.SurvivedCommitCount != 0 {
		attrs = append(attrs, slog.Group("commits",
			slog.Int64("lost", s.LostCommitCount),
			slog.Int64("unproven", s.UnprovenCommitCount),
			slog.Int64("survived", s.SurvivedCommitCount)))
	}
	if b := s.Breaker; b != nil {
		attrs = append(attrs, slog.Attr{Key: "breaker", Value: breakerValue(b)})
	}
	if v, ok := contentionValue(s.Contention); ok {
		attrs = append(attrs, slog.Attr{Key: "contention", Value: v})
	}
	if v, ok := slotsValue(s.Slots); ok {
		attrs = append(attrs, slog.Attr{Key: "slots", Value: v})
	}
	if v, ok := slotsValue(s.CancelSlots); ok {
		attrs = append(attrs, slog.Attr{Key: "cancel_slots", Value: v})
	}
	return slog.GroupValue(attrs...)
}

func heldMean(d time.Duration, n int64) time.Duration {
	if n <= 0 {
		return 0
	}
	return d / time.Duration(n)
}

// breakerValue returns the group of a breaker's statistics.
func breakerValue(b *pgtx.BreakerStats) slog.Value {
	attrs := make([]slog.Attr, 0, 7)
	if b.Name != "" {
		attrs = append(attrs, slog.String("name", b.Name))
	}
	attrs = append(attrs,
		slog.String("state", b.State.String()),
		slog.Int64("calls", b.CallCount),
		slog.Int64("failures", b.FailureCount),
		slog.Int64("slow", b.SlowCount),
		slog.Int64("rejected", b.RejectedCount),
		slog.Int64("opened", b.OpenedCount))
	return slog.GroupValue(attrs...)
}

// contentionValue returns the group of the labels the contention manager
// limits, and false when it limits none.
func contentionValue(cs []pgtx.ContentionStats) (slog.Value, bool) {
	var attrs []slog.Attr
	for _, c := range cs {
		if !c.Limiting {
			continue
		}
		key := c.Label
		if key == "" {
			key = "_" // an empty key would inline the group
		}
		attrs = append(attrs, slog.Group(key,
			slog.Int("limit", c.Limit),
			slog.Int("running", c.Running),
			slog.Int("waiting", c.Waiting)))
	}
	return slog.GroupValue(attrs...), len(attrs) > 0
}

// slotsValue returns the group of a pool's slot statistics, and false
// while its counts are all 0.
func slotsValue(s slots.Stats) (slog.Value, bool) {
	if s.RefusedCount|s.ProbeCount|s.RaisedCount|s.WaitCount == 0 {
		return slog.Value{}, false
	}
	return slog.GroupValue(
		slog.Int64("refused", s.RefusedCount),
		slog.Int64("limit", int64(s.Limit)),
		slog.Int64("probes", s.ProbeCount),
		slog.Int64("raised", s.RaisedCount),
		slog.Int64("waits", s.WaitCount),
		slog.Duration("wait", s.WaitDuration)), true
}

// Diagnosis returns a [slog.LogValuer] of a storm diagnosis, as a group of
// its verdict and figures: verdict, interval, arrival_rate (per second),
// mean_hold, waiting, mean_acquire_wait, acquire_timeouts, queue_full,
// utilization and max_conns (when the pool size is known), in_flight,
// oldest_in_flight, advice, and reasons (a list of sentences; left out
// when there are none):
//
//	if d := storm.Diagnose(before, after, interval, nil); d.Verdict != storm.Healthy {
//		logger.Warn("pool saturated", "diagnosis", pgtxslog.Diagnosis(d))
//	}
func Diagnosis(d storm.Diagnosis) slog.LogValuer { return diagnosisValue(d) }

type diagnosisValue storm.Diagnosis

// LogValue returns the group documented at [Diagnosis].
func (d diagnosisValue) LogValue() slog.Value {
	attrs := make([]slog.Attr, 0, 15)
	attrs = append(attrs,
		slog.String("verdict", d.Verdict.String()),
		slog.Duration("interval", d.Interval),
		slog.Float64("arrival_rate", d.ArrivalRate),
		slog.Duration("mean_hold", d.MeanHold),
		slog.Int64("waiting", d.Waiting),
		slog.Duration("mean_acquire_wait", d.MeanAcquireWait),
		slog.Int64("acquire_timeouts", d.AcquireTimeoutCount),
		slog.Int64("queue_full", d.QueueFullCount))
	if d.MaxConns > 0 {
		attrs = append(attrs,
			slog.Float64("utilization", d.Utilization),
			slog.Int64("max_conns", int64(d.MaxConns)))
	}
	attrs = append(attrs,
		slog.Int("in_flight", d.InFlight),
		slog.Duration("oldest_in_flight", d.OldestInFlight))
	if d.Advice != "" {
		attrs = append(attrs, slog.String("advice", d.Advice))
	}
	if len(d.Reasons) > 0 {
		attrs = append(attrs, slog.Any("reasons", d.Reasons))
	}
	return slog.GroupValue(attrs...)
}
