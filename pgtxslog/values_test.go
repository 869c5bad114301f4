package pgtxslog_test

import (
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxslog"
	"github.com/pgtx-go/pgtx/slots"
	"github.com/pgtx-go/pgtx/storm"
)

// flatten returns the attributes of a group value under dotted keys,
// rendered with slog.Value.String.
func flatten(v slog.Value) map[string]string {
	out := map[string]string{}
	var walk func(prefix string, v slog.Value)
	walk = func(prefix string, v slog.Value) {
		for _, a := range v.Resolve().Group() {
			key := prefix + a.Key
			if a.Value.Kind() == slog.KindGroup {
				walk(key+".", a.Value)
				continue
			}
			out[key] = a.Value.Resolve().String()
		}
	}
	walk("", v)
	return out
}

// assertFlat checks that got holds exactly want.
func assertFlat(t *testing.T, got, want map[string]string) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok {
			t.Errorf("%s missing, want %q", k, want[k])
		} else if g != want[k] {
			t.Errorf("%s = %q, want %q", k, g, want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %s = %q", k, got[k])
		}
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	hist := func(count int64, total, maxD time.Duration, buckets ...int64) pgtx.Histogram {
		return pgtx.Histogram{Count: count, Duration: total, Max: maxD,
			Bounds: []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond}, Buckets: buckets}
	}
	base := map[string]string{
		"waiting": "0", "in_flight": "0", "oldest_in_flight": "0s",
		"acquire_wait.count": "0", "acquire_wait.mean": "0s", "acquire_wait.p99": "0s", "acquire_wait.max": "0s",
		"acquire_timeouts": "0", "queue_full": "0", "transactions": "0", "held": "0", "held_mean": "0s",
	}
	with := func(kv ...string) map[string]string {
		m := maps.Clone(base)
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name  string
		stats pgtx.Stats
		want  map[string]string
	}{
		{
			name: "zero: the groups of zeros left out",
			want: base,
		},
		{
			name: "contention manager not limiting",
			stats: pgtx.Stats{Contention: []pgtx.ContentionStats{{AttemptCount: 10}, {Label: "pay", AttemptCount: 3}},
				Cancels: pgtx.CancelStats{Latency: hist(0, 0, 0, 0, 0, 0, 0)}},
			want: base,
		},
		{
			name: "filled",
			stats: pgtx.Stats{
				Waiting: 5, InFlight: 8, OldestInFlight: 2 * time.Second,
				AcquireWait:         hist(100, 500*time.Millisecond, 40*time.Millisecond, 50, 45, 5, 0),
				AcquireTimeoutCount: 3, QueueFullCount: 2, TransactionCount: 1000,
				HeldCount: 990, HeldDuration: 990 * 7 * time.Millisecond,
				Cancels: pgtx.CancelStats{SentCount: 4, SignalledCount: 2, NotFoundCount: 1, PoolErrorCount: 1,
					ProtocolCount: 1, ClosedCount: 1, Latency: hist(4, 4*time.Millisecond, 2*time.Millisecond, 2, 2, 0, 0)},
				Resolved: pgtx.ResolveStats{CommittedCount: 3, AbortedCount: 2, NotAppliedCount: 1, UnknownCount: 4,
					UnsupportedCount: 1, ElsewhereCount: 2, UnansweredCount: 1, TerminatedCount: 1},
				Breaker: &pgtx.BreakerStats{State: pgtx.BreakerHalfOpen, CallCount: 20, FailureCount: 11, SlowCount: 2,
					RejectedCount: 300, OpenedCount: 2},
				LostCommitCount: 4, UnprovenCommitCount: 6, SurvivedCommitCount: 1,
				Contention: []pgtx.ContentionStats{
					{Limiting: true, Limit: 2, Running: 2, Waiting: 1},
					{Label: "pay", AttemptCount: 7},
					{Label: "transfer", Limiting: true, Limit: 6, Running: 5, Waiting: 9},
				},
			},
			want: map[string]string{
				"waiting": "5", "in_flight": "8", "oldest_in_flight": "2s",
				"acquire_wait.count": "100", "acquire_wait.mean": "5ms", "acquire_wait.p99": "100ms", "acquire_wait.max": "40ms",
				"acquire_timeouts": "3", "queue_full": "2", "transactions": "1000", "held": "990", "held_mean": "7ms",
				"cancels.sent": "4", "cancels.signalled": "2", "cancels.not_found": "1", "cancels.pool_errors": "1",
				"cancels.protocol": "1", "cancels.closed": "1", "cancels.latency_p99": "10ms",
				"resolved.committed": "3", "resolved.aborted": "2", "resolved.not_applied": "1", "resolved.unknown": "4",
				"resolved.unsupported": "1", "resolved.elsewhere": "2", "resolved.terminated": "1",
				"resolved.lost": "0", "resolved.restarted": "0", "resolved.forgotten": "0", "resolved.unanswered": "1",
				"breaker.state": "half-open", "breaker.calls": "20", "breaker.failures": "11", "breaker.slow": "2",
				"breaker.rejected": "300", "breaker.opened": "2",
				"commits.lost": "4", "commits.unproven": "6", "commits.survived": "1",
				"contention._.limit": "2", "contention._.running": "2", "contention._.waiting": "1",
				"contention.transfer.limit": "6", "contention.transfer.running": "5", "contention.transfer.waiting": "9",
			},
		},
		{
			name:  "named breaker, only a closed cancel",
			stats: pgtx.Stats{Breaker: &pgtx.BreakerStats{Name: "main"}, Cancels: pgtx.CancelStats{ClosedCount: 1}},
			want: with("breaker.name", "main", "breaker.state", "closed", "breaker.calls", "0", "breaker.failures", "0",
				"breaker.slow", "0", "breaker.rejected", "0", "breaker.opened", "0",
				"cancels.sent", "0", "cancels.signalled", "0", "cancels.not_found", "0", "cancels.pool_errors", "0",
				"cancels.protocol", "0", "cancels.closed", "1", "cancels.latency_p99", "0s"),
		},
		{
			name: "slots: the main pool refused, the cancel pool not",
			stats: pgtx.Stats{
				Slots: slots.Stats{RefusedCount: 12, Limit: 3, ProbeCount: 5, RaisedCount: 1, WaitCount: 40,
					WaitDuration: 2 * time.Second},
				CancelSlots: slots.Stats{Limit: 1},
			},
			want: with("slots.refused", "12", "slots.limit", "3", "slots.probes", "5", "slots.raised", "1",
				"slots.waits", "40", "slots.wait", "2s"),
		},
		{
			name:  "cancel slots",
			stats: pgtx.Stats{Slots: slots.Stats{Limit: 4}, CancelSlots: slots.Stats{RefusedCount: 1, Limit: 1}},
			want: with("cancel_slots.refused", "1", "cancel_slots.limit", "1", "cancel_slots.probes", "0",
				"cancel_slots.raised", "0", "cancel_slots.waits", "0", "cancel_slots.wait", "0s"),
		},
		{
			name:  "only a resolution",
			stats: pgtx.Stats{Resolved: pgtx.ResolveStats{TerminatedCount: 1}},
			want: with("resolved.committed", "0", "resolved.aborted", "0", "resolved.not_applied", "0", "resolved.unknown", "0",
				"resolved.unsupported", "0", "resolved.elsewhere", "0", "resolved.terminated", "1",
				"resolved.lost", "0", "resolved.restarted", "0", "resolved.forgotten", "0", "resolved.unanswered", "0"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := pgtxslog.Stats(tt.stats).LogValue()
			if v.Kind() != slog.KindGroup {
				t.Fatalf("LogValue is a %v, want a group", v.Kind())
			}
			assertFlat(t, flatten(v), tt.want)
		})
	}
}

func TestDiagnosis(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		d    storm.Diagnosis
		want map[string]string
	}{
		{
			name: "timeout storm",
			d: storm.Diagnosis{
				Verdict: storm.TimeoutStorm, Interval: 10 * time.Second, ArrivalRate: 40, MeanHold: 300 * time.Millisecond,
				Waiting: 20, MeanAcquireWait: 450 * time.Millisecond, AcquireTimeoutCount: 247, QueueFullCount: 1,
				Utilization: 3, MaxConns: 4, InFlight: 4, OldestInFlight: 290 * time.Millisecond,
				Advice: "shed load", Reasons: []string{"queue depth 20", "247 acquire timeouts"},
			},
			want: map[string]string{
				"verdict": "timeout storm", "interval": "10s", "arrival_rate": "40", "mean_hold": "300ms",
				"waiting": "20", "mean_acquire_wait": "450ms", "acquire_timeouts": "247", "queue_full": "1",
				"utilization": "3", "max_conns": "4", "in_flight": "4", "oldest_in_flight": "290ms",
				"advice": "shed load", "reasons": "[queue depth 20 247 acquire timeouts]",
			},
		},
		{
			name: "healthy, pool size unknown, no reasons",
			d:    storm.Diagnosis{Verdict: storm.Healthy, Interval: time.Second, ArrivalRate: 2.5, MeanHold: 3 * time.Millisecond},
			want: map[string]string{
				"verdict": "healthy", "interval": "1s", "arrival_rate": "2.5", "mean_hold": "3ms",
				"waiting": "0", "mean_acquire_wait": "0s", "acquire_timeouts": "0", "queue_full": "0",
				"in_flight": "0", "oldest_in_flight": "0s",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := pgtxslog.Diagnosis(tt.d).LogValue()
			if v.Kind() != slog.KindGroup {
				t.Fatalf("LogValue is a %v, want a group", v.Kind())
			}
			assertFlat(t, flatten(v), tt.want)
		})
	}
}
