package pgtxprom

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/slots"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// offlineDSN points at a port nothing listens on: pools connect lazily, so
// one made from it works for Stats and fails every acquire at once.
const offlineDSN = "postgres://pgtx@127.0.0.1:1/pgtx?connect_timeout=1"

// newOfflinePool returns a pool that never reached a server, with maxConns
// connections at most and no cancel pool (CancelModeProtocol), so that it
// starts no background connect. It is closed when the test ends.
func newOfflinePool(t *testing.T, maxConns int32) *pgtx.Pool {
	t.Helper()
	return newOfflinePoolWith(t, func(cfg *pgtx.Config) { cfg.MaxConns = maxConns })
}

// newOfflinePoolWith is newOfflinePool with the configuration edited by
// edit.
func newOfflinePoolWith(t *testing.T, edit func(*pgtx.Config)) *pgtx.Pool {
	t.Helper()
	cfg, err := pgtx.ParseConfig(offlineDSN)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	cfg.CancelMode = pgtx.CancelModeProtocol
	edit(cfg)
	pool, err := pgtx.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("NewWithConfig: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newCollector is NewCollector, which must not fail.
func newCollector(t *testing.T, pool *pgtx.Pool, name string, opts ...CollectorOption) *Collector {
	t.Helper()
	c, err := NewCollector(pool, name, opts...)
	if err != nil {
		t.Fatalf("NewCollector: %v", err)
	}
	return c
}

// collectors are the Collectors of several pools, collected as one, as a
// registry collects them.
type collectors []*Collector

func (cs collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

func (cs collectors) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}

// newOfflineCollector returns the Collectors of two offline pools: "a" with
// 3 connections at most and "b" with 7.
func newOfflineCollector(t *testing.T, opts ...CollectorOption) collectors {
	t.Helper()
	return collectors{
		newCollector(t, newOfflinePool(t, 7), "b", opts...),
		newCollector(t, newOfflinePool(t, 3), "a", opts...),
	}
}

func TestCollectZeroStats(t *testing.T) {
	c := newOfflineCollector(t)
	tests := []struct {
		name   string
		metric string
		want   string
	}{
		{
			name:   "no waiters",
			metric: "pgtx_pool_waiters",
			want: `
# HELP pgtx_pool_waiters Acquires of a pool connection in progress now: the queue depth. Alert on it staying above 0, not on utilisation.
# TYPE pgtx_pool_waiters gauge
pgtx_pool_waiters{pool="a"} 0
pgtx_pool_waiters{pool="b"} 0
`,
		},
		{
			name:   "max connections as configured",
			metric: "pgtx_pool_max_connections",
			want: `
# HELP pgtx_pool_max_connections Maximum size of the pool.
# TYPE pgtx_pool_max_connections gauge
pgtx_pool_max_connections{pool="a"} 3
pgtx_pool_max_connections{pool="b"} 7
`,
		},
		{
			name:   "slot limit at the maximum before any refusal",
			metric: "pgtx_pool_slot_limit",
			want: `
# HELP pgtx_pool_slot_limit Connections the pool lets itself hold: its maximum until a connect is refused for lack of slots while it holds some, then what it held, raised by each probe that connects.
# TYPE pgtx_pool_slot_limit gauge
pgtx_pool_slot_limit{pool="a"} 3
pgtx_pool_slot_limit{pool="b"} 7
`,
		},
		{
			name:   "no refused connects",
			metric: "pgtx_pool_slot_refused_connects_total",
			want: `
# HELP pgtx_pool_slot_refused_connects_total Connects of the pool the server or a pooler refused for lack of connection slots (53300, too many clients).
# TYPE pgtx_pool_slot_refused_connects_total counter
pgtx_pool_slot_refused_connects_total{pool="a"} 0
pgtx_pool_slot_refused_connects_total{pool="b"} 0
`,
		},
		{
			name:   "connections by state",
			metric: "pgtx_pool_connections",
			want: `
# HELP pgtx_pool_connections Connections of the pool, by state.
# TYPE pgtx_pool_connections gauge
pgtx_pool_connections{pool="a",state="acquired"} 0
pgtx_pool_connections{pool="a",state="constructing"} 0
pgtx_pool_connections{pool="a",state="idle"} 0
pgtx_pool_connections{pool="b",state="acquired"} 0
pgtx_pool_connections{pool="b",state="constructing"} 0
pgtx_pool_connections{pool="b",state="idle"} 0
`,
		},
		{
			name:   "cancels by outcome",
			metric: "pgtx_cancels_total",
			want: `
# HELP pgtx_cancels_total Statements cancelled because their context ended, by outcome.
# TYPE pgtx_cancels_total counter
pgtx_cancels_total{outcome="closed",pool="a"} 0
pgtx_cancels_total{outcome="not_found",pool="a"} 0
pgtx_cancels_total{outcome="protocol",pool="a"} 0
pgtx_cancels_total{outcome="signalled",pool="a"} 0
pgtx_cancels_total{outcome="closed",pool="b"} 0
pgtx_cancels_total{outcome="not_found",pool="b"} 0
pgtx_cancels_total{outcome="protocol",pool="b"} 0
pgtx_cancels_total{outcome="signalled",pool="b"} 0
`,
		},
		{
			name:   "empty cancel latency histogram",
			metric: "pgtx_cancel_latency_seconds",
			want:   "\n# HELP pgtx_cancel_latency_seconds Time from a context's end to the cancel's answer.\n# TYPE pgtx_cancel_latency_seconds histogram\n" + emptyHistogram("pgtx_cancel_latency_seconds", "a") + emptyHistogram("pgtx_cancel_latency_seconds", "b"),
		},
		{
			name:   "empty acquire wait histogram",
			metric: "pgtx_pool_acquire_wait_seconds",
			want:   "\n# HELP pgtx_pool_acquire_wait_seconds Waits of Transaction for a pool connection.\n# TYPE pgtx_pool_acquire_wait_seconds histogram\n" + emptyHistogram("pgtx_pool_acquire_wait_seconds", "a") + emptyHistogram("pgtx_pool_acquire_wait_seconds", "b"),
		},
		{
			name:   "no transactions",
			metric: "pgtx_transactions_started_total",
			want: `
# HELP pgtx_transactions_started_total Transaction calls started.
# TYPE pgtx_transactions_started_total counter
pgtx_transactions_started_total{pool="a"} 0
pgtx_transactions_started_total{pool="b"} 0
`,
		},
		{
			name:   "destroyed connections by reason",
			metric: "pgtx_pool_destroyed_connections_total",
			want: `
# HELP pgtx_pool_destroyed_connections_total Connections the pool closed because of MaxConnLifetime (max_lifetime) or MaxConnIdleTime (max_idle).
# TYPE pgtx_pool_destroyed_connections_total counter
pgtx_pool_destroyed_connections_total{pool="a",reason="max_idle"} 0
pgtx_pool_destroyed_connections_total{pool="a",reason="max_lifetime"} 0
pgtx_pool_destroyed_connections_total{pool="b",reason="max_idle"} 0
pgtx_pool_destroyed_connections_total{pool="b",reason="max_lifetime"} 0
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := testutil.CollectAndCompare(c, strings.NewReader(tt.want), tt.metric); err != nil {
				t.Error(err)
			}
		})
	}
}

// emptyHistogram is the exposition of an empty acquire wait histogram of
// pool.
func emptyHistogram(name, pool string) string {
	var b strings.Builder
	for _, le := range []string{"0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"} {
		fmt.Fprintf(&b, "%s_bucket{pool=%q,le=%q} 0\n", name, pool, le)
	}
	fmt.Fprintf(&b, "%s_sum{pool=%q} 0\n%s_count{pool=%q} 0\n", name, pool, name, pool)
	return b.String()
}

func TestCollectAndCount(t *testing.T) {
	c := newOfflineCollector(t)
	tests := []struct {
		metric string
		want   int // series of two pools
	}{
		{"pgtx_pool_waiters", 2},
		{"pgtx_pool_acquire_wait_seconds", 2},
		{"pgtx_pool_acquire_timeouts_total", 2},
		{"pgtx_pool_queue_full_total", 2},
		{"pgtx_pool_connections", 6},
		{"pgtx_pool_max_connections", 2},
		{"pgtx_pool_acquires_total", 2},
		{"pgtx_pool_acquire_seconds_total", 2},
		{"pgtx_pool_empty_acquires_total", 2},
		{"pgtx_pool_empty_acquire_wait_seconds_total", 2},
		{"pgtx_pool_canceled_acquires_total", 2},
		{"pgtx_pool_new_connections_total", 2},
		{"pgtx_pool_destroyed_connections_total", 4},
		{"pgtx_transactions_started_total", 2},
		{"pgtx_transactions_in_flight", 2},
		{"pgtx_transaction_oldest_in_flight_seconds", 2},
		{"pgtx_connection_hold_seconds_total", 2},
		{"pgtx_connection_holds_total", 2},
		{"pgtx_cancels_total", 8},
		{"pgtx_cancel_pool_errors_total", 2},
		{"pgtx_cancel_latency_seconds", 2},
		// No cancel pool in CancelModeProtocol.
		{"pgtx_cancel_pool_connections", 0},
		{"pgtx_cancel_pool_max_connections", 0},
		{"pgtx_pool_slot_refused_connects_total", 2},
		{"pgtx_pool_slot_limit", 2},
		{"pgtx_pool_slot_probes_total", 2},
		{"pgtx_pool_slot_raises_total", 2},
		{"pgtx_pool_slot_waits_total", 2},
		{"pgtx_pool_slot_wait_seconds_total", 2},
		// No cancel pool, so no slot limit of its own.
		{"pgtx_cancel_pool_slot_refused_connects_total", 0},
		{"pgtx_cancel_pool_slot_limit", 0},
		{"pgtx_cancel_pool_slot_probes_total", 0},
		{"pgtx_cancel_pool_slot_raises_total", 0},
		{"pgtx_cancel_pool_slot_waits_total", 0},
		{"pgtx_cancel_pool_slot_wait_seconds_total", 0},
		// No circuit breaker.
		{"pgtx_breaker_state", 0},
		{"pgtx_breaker_rejected_total", 0},
		{"pgtx_breaker_opens_total", 0},
		{"pgtx_commit_resolutions_total", 8},
		{"pgtx_commit_unknown_total", 10},
		{"pgtx_failover_commit_checks_total", 6},
		// The contention manager's empty label, on by default.
		{"pgtx_contention_limit", 2},
		{"pgtx_contention_waiting", 2},
		{"pgtx_contention_wait_seconds", 2},
		{"pgtx_contention_attempts_total", 2},
		{"pgtx_contention_conflicts_total", 2},
	}
	total := 0
	for _, tt := range tests {
		total += tt.want
		t.Run(tt.metric, func(t *testing.T) {
			if got := testutil.CollectAndCount(c, tt.metric); got != tt.want {
				t.Errorf("CollectAndCount(%s) = %d, want %d", tt.metric, got, tt.want)
			}
		})
	}
	if got := testutil.CollectAndCount(c); got != total {
		t.Errorf("CollectAndCount() = %d, want %d: a metric is missing from the table", got, total)
	}
}

func TestCollectorLint(t *testing.T) {
	tests := []struct {
		name string
		c    func(t *testing.T) prometheus.Collector
	}{
		{"two pools", func(t *testing.T) prometheus.Collector { return newOfflineCollector(t) }},
		{"one pool", func(t *testing.T) prometheus.Collector { return newCollector(t, newOfflinePool(t, 1), "main") }},
		{"namespace", func(t *testing.T) prometheus.Collector { return newOfflineCollector(t, WithNamespace("app")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problems, err := testutil.CollectAndLint(tt.c(t))
			if err != nil {
				t.Fatalf("CollectAndLint: %v", err)
			}
			for _, p := range problems {
				t.Errorf("lint: %s: %s", p.Metric, p.Text)
			}
		})
	}
}

func TestWithNamespace(t *testing.T) {
	pool := newOfflinePool(t, 2)
	tests := []struct {
		name string
		opts []CollectorOption
		want string
	}{
		{"default", nil, "pgtx_pool_waiters"},
		{"nil option", []CollectorOption{nil}, "pgtx_pool_waiters"},
		{"custom", []CollectorOption{WithNamespace("app")}, "app_pool_waiters"},
		{"empty", []CollectorOption{WithNamespace("")}, "pool_waiters"},
		{"last wins", []CollectorOption{WithNamespace("x"), WithNamespace("y")}, "y_pool_waiters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCollector(t, pool, "main", tt.opts...)
			if got := testutil.CollectAndCount(c, tt.want); got != 1 {
				t.Errorf("CollectAndCount(%s) = %d, want 1", tt.want, got)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	c := newCollector(t, newOfflinePool(t, 1), "main")
	ch := make(chan *prometheus.Desc, 64)
	c.Describe(ch)
	close(ch)
	var n int
	for d := range ch {
		n++
		if !strings.Contains(d.String(), `fqName: "pgtx_`) {
			t.Errorf("descriptor outside the namespace: %v", d)
		}
	}
	if n != len(c.descs) || n == 0 {
		t.Errorf("Describe sent %d descriptors, want %d", n, len(c.descs))
	}
	gatherPedantic(t, c)
}

// TestNewCollectorNilPool: a nil pool is an invalid argument, named in
// the error, not a panic.
func TestNewCollectorNilPool(t *testing.T) {
	c, err := NewCollector(nil, "broken")
	if c != nil || !errors.Is(err, pgtx.ErrInvalidArgument) {
		t.Fatalf("NewCollector(nil) = %v, %v; want nil and an error matching pgtx.ErrInvalidArgument", c, err)
	}
	if msg := err.Error(); !strings.Contains(msg, `"broken"`) || !strings.Contains(msg, "nil pool") {
		t.Errorf("error %q does not name the pool and the nil pool", msg)
	}
}

// TestCollectorsOfSeveralPools: the Collectors of several pools register in
// one registry side by side, each series under its pool's name, and a
// second Collector under a name already taken is refused.
func TestCollectorsOfSeveralPools(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(newCollector(t, newOfflinePool(t, 1), "interactive")); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(newCollector(t, newOfflinePool(t, 2), "batch")); err != nil {
		t.Fatalf("a second pool's Collector: %v", err)
	}
	want := `
# HELP pgtx_pool_max_connections Maximum size of the pool.
# TYPE pgtx_pool_max_connections gauge
pgtx_pool_max_connections{pool="batch"} 2
pgtx_pool_max_connections{pool="interactive"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "pgtx_pool_max_connections"); err != nil {
		t.Error(err)
	}
	if err := reg.Register(newCollector(t, newOfflinePool(t, 3), "batch")); err == nil {
		t.Error("a Collector under a pool name already registered was accepted")
	}
}

// TestCollectorBreaker drives circuit breakers with calls that cannot
// connect: each opens after one failure; one stays open for an hour, the
// other goes half-open at once.
func TestCollectorBreaker(t *testing.T) {
	newPool := func(openFor time.Duration) *pgtx.Pool {
		return newOfflinePoolWith(t, func(cfg *pgtx.Config) {
			cfg.Retry.MaxRetries, cfg.Retry.MaxAdaptiveRetries, cfg.Retry.UnavailableTimeout = -1, -1, -1
			cfg.Breaker = &pgtx.BreakerConfig{ConsecutiveFailures: 1, OpenFor: openFor}
		})
	}
	open, halfOpen := newPool(time.Hour), newPool(time.Nanosecond)
	c := collectors{newCollector(t, open, "open"), newCollector(t, halfOpen, "half")}
	call := func(pool *pgtx.Pool) error {
		return pgtx.Transaction(context.Background(), pool, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
	}
	const header = `
# HELP pgtx_breaker_state State of the pool's circuit breaker: 1 for the state it is in (closed, half-open, open), 0 for the others.
# TYPE pgtx_breaker_state gauge
# HELP pgtx_breaker_rejected_total Transaction calls the circuit breaker refused because it was open.
# TYPE pgtx_breaker_rejected_total counter
# HELP pgtx_breaker_opens_total Times the circuit breaker opened.
# TYPE pgtx_breaker_opens_total counter
`
	steps := []struct {
		name string
		do   func(t *testing.T)
		want string
	}{
		{
			name: "closed",
			do:   func(*testing.T) {},
			want: `
pgtx_breaker_state{pool="half",state="closed"} 1
pgtx_breaker_state{pool="half",state="half-open"} 0
pgtx_breaker_state{pool="half",state="open"} 0
pgtx_breaker_state{pool="open",state="closed"} 1
pgtx_breaker_state{pool="open",state="half-open"} 0
pgtx_breaker_state{pool="open",state="open"} 0
pgtx_breaker_rejected_total{pool="half"} 0
pgtx_breaker_rejected_total{pool="open"} 0
pgtx_breaker_opens_total{pool="half"} 0
pgtx_breaker_opens_total{pool="open"} 0
`,
		},
		{
			name: "a failure opens both",
			do: func(t *testing.T) {
				for _, p := range []*pgtx.Pool{open, halfOpen} {
					if err := call(p); err == nil || errors.Is(err, pgtx.ErrCircuitOpen) {
						t.Fatalf("Transaction = %v, want a connect error", err)
					}
				}
				time.Sleep(time.Millisecond) // past the half-open pool's OpenFor
			},
			want: `
pgtx_breaker_state{pool="half",state="closed"} 0
pgtx_breaker_state{pool="half",state="half-open"} 1
pgtx_breaker_state{pool="half",state="open"} 0
pgtx_breaker_state{pool="open",state="closed"} 0
pgtx_breaker_state{pool="open",state="half-open"} 0
pgtx_breaker_state{pool="open",state="open"} 1
pgtx_breaker_rejected_total{pool="half"} 0
pgtx_breaker_rejected_total{pool="open"} 0
pgtx_breaker_opens_total{pool="half"} 1
pgtx_breaker_opens_total{pool="open"} 1
`,
		},
		{
			name: "the open breaker refuses",
			do: func(t *testing.T) {
				if err := call(open); !errors.Is(err, pgtx.ErrCircuitOpen) {
					t.Fatalf("Transaction = %v, want ErrCircuitOpen", err)
				}
			},
			want: `
pgtx_breaker_state{pool="half",state="closed"} 0
pgtx_breaker_state{pool="half",state="half-open"} 1
pgtx_breaker_state{pool="half",state="open"} 0
pgtx_breaker_state{pool="open",state="closed"} 0
pgtx_breaker_state{pool="open",state="half-open"} 0
pgtx_breaker_state{pool="open",state="open"} 1
pgtx_breaker_rejected_total{pool="half"} 0
pgtx_breaker_rejected_total{pool="open"} 1
pgtx_breaker_opens_total{pool="half"} 1
pgtx_breaker_opens_total{pool="open"} 1
`,
		},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.do(t)
			err := testutil.CollectAndCompare(c, strings.NewReader(header+st.want),
				"pgtx_breaker_state", "pgtx_breaker_rejected_total", "pgtx_breaker_opens_total")
			if err != nil {
				t.Error(err)
			}
		})
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("CollectAndLint = %v, %v", problems, err)
	}
}

func TestHistogramBuckets(t *testing.T) {
	bounds := []time.Duration{time.Millisecond, 10 * time.Millisecond, time.Second}
	tests := []struct {
		name        string
		h           pgtx.Histogram
		wantCount   uint64
		wantSum     float64
		wantBuckets map[float64]uint64
	}{
		{
			name:        "empty",
			h:           pgtx.Histogram{Bounds: bounds, Buckets: make([]int64, 4)},
			wantBuckets: map[float64]uint64{0.001: 0, 0.01: 0, 1: 0},
		},
		{
			name:        "cumulative, overflow in the count",
			h:           pgtx.Histogram{Bounds: bounds, Buckets: []int64{1, 2, 3, 4}, Count: 10, Duration: 5500 * time.Millisecond},
			wantCount:   10,
			wantSum:     5.5,
			wantBuckets: map[float64]uint64{0.001: 1, 0.01: 3, 1: 6},
		},
		{
			// The snapshot reads the buckets before the count: the count
			// follows the buckets.
			name:        "count behind the buckets",
			h:           pgtx.Histogram{Bounds: bounds, Buckets: []int64{0, 2, 0, 1}, Count: 2, Duration: time.Second},
			wantCount:   3,
			wantSum:     1,
			wantBuckets: map[float64]uint64{0.001: 0, 0.01: 2, 1: 2},
		},
		{
			name:        "counts shorter than the bounds",
			h:           pgtx.Histogram{Bounds: bounds, Buckets: []int64{4}, Count: 4},
			wantCount:   4,
			wantBuckets: map[float64]uint64{0.001: 4, 0.01: 4, 1: 4},
		},
		{
			name:        "zero value",
			wantBuckets: map[float64]uint64{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			count, sum, buckets := histogramBuckets(tt.h)
			if count != tt.wantCount || math.Abs(sum-tt.wantSum) > 1e-9 {
				t.Errorf("count, sum = %d, %g; want %d, %g", count, sum, tt.wantCount, tt.wantSum)
			}
			if fmt.Sprint(buckets) != fmt.Sprint(tt.wantBuckets) {
				t.Errorf("buckets = %v, want %v", buckets, tt.wantBuckets)
			}
		})
	}
}

// statsCollector collects one crafted Stats with a Collector's descriptors.
type statsCollector struct {
	c *Collector
	s pgtx.Stats
}

func (sc statsCollector) Describe(ch chan<- *prometheus.Desc) { sc.c.Describe(ch) }
func (sc statsCollector) Collect(ch chan<- prometheus.Metric) { sc.c.collectPool(ch, sc.s) }

// TestCollectStatsFields checks that each field of Stats reaches its metric.
func TestCollectStatsFields(t *testing.T) {
	s := pgtx.Stats{
		Waiting:             2,
		AcquireTimeoutCount: 3,
		QueueFullCount:      4,
		TransactionCount:    5,
		HeldCount:           6,
		HeldDuration:        7 * time.Second,
		InFlight:            8,
		OldestInFlight:      9 * time.Second,
		Cancels: pgtx.CancelStats{
			SentCount: 100, SignalledCount: 11, NotFoundCount: 12, PoolErrorCount: 13, ProtocolCount: 14, ClosedCount: 15,
			Latency: pgtx.Histogram{Count: 16, Duration: 17 * time.Second, Bounds: []time.Duration{time.Second}, Buckets: []int64{10, 6}},
		},
		Resolved: pgtx.ResolveStats{CommittedCount: 18, AbortedCount: 19, NotAppliedCount: 20, UnknownCount: 21,
			UnsupportedCount: 1, ElsewhereCount: 2, RestartedCount: 3, ForgottenCount: 4, UnansweredCount: 11},
		Breaker:         &pgtx.BreakerStats{State: pgtx.BreakerOpen, RejectedCount: 22, OpenedCount: 23},
		LostCommitCount: 29, UnprovenCommitCount: 30, SurvivedCommitCount: 31,
		Contention: []pgtx.ContentionStats{
			{Label: ""},
			{Label: "transfer", Limiting: true, Limit: 24, Waiting: 25, AttemptCount: 26, ConflictCount: 27, CommitCount: 28},
		},
		Slots: slots.Stats{RefusedCount: 32, Limit: 33, ProbeCount: 34, RaisedCount: 35, WaitCount: 36,
			WaitDuration: 37500 * time.Millisecond},
		CancelSlots: slots.Stats{RefusedCount: 38, Limit: 1, ProbeCount: 39, RaisedCount: 40, WaitCount: 41,
			WaitDuration: 420 * time.Millisecond},
	}
	sc := statsCollector{c: newCollector(t, newOfflinePool(t, 1), "main"), s: s}
	want := `
# HELP pgtx_pool_waiters Acquires of a pool connection in progress now: the queue depth. Alert on it staying above 0, not on utilisation.
# TYPE pgtx_pool_waiters gauge
pgtx_pool_waiters{pool="main"} 2
# HELP pgtx_pool_acquire_timeouts_total Waits of Transaction for a pool connection ended by the acquire timeout.
# TYPE pgtx_pool_acquire_timeouts_total counter
pgtx_pool_acquire_timeouts_total{pool="main"} 3
# HELP pgtx_pool_queue_full_total Transaction calls refused at once because MaxWaiters callers were waiting for a connection.
# TYPE pgtx_pool_queue_full_total counter
pgtx_pool_queue_full_total{pool="main"} 4
# HELP pgtx_transactions_started_total Transaction calls started.
# TYPE pgtx_transactions_started_total counter
pgtx_transactions_started_total{pool="main"} 5
# HELP pgtx_connection_holds_total Transaction attempts that held a connection and released it.
# TYPE pgtx_connection_holds_total counter
pgtx_connection_holds_total{pool="main"} 6
# HELP pgtx_connection_hold_seconds_total Total time Transaction attempts held a connection, from BEGIN to release.
# TYPE pgtx_connection_hold_seconds_total counter
pgtx_connection_hold_seconds_total{pool="main"} 7
# HELP pgtx_transactions_in_flight Transaction attempts holding a connection now.
# TYPE pgtx_transactions_in_flight gauge
pgtx_transactions_in_flight{pool="main"} 8
# HELP pgtx_transaction_oldest_in_flight_seconds Age of the oldest Transaction attempt holding a connection now, 0 when there is none.
# TYPE pgtx_transaction_oldest_in_flight_seconds gauge
pgtx_transaction_oldest_in_flight_seconds{pool="main"} 9
# HELP pgtx_cancels_total Statements cancelled because their context ended, by outcome.
# TYPE pgtx_cancels_total counter
pgtx_cancels_total{outcome="closed",pool="main"} 15
pgtx_cancels_total{outcome="not_found",pool="main"} 12
pgtx_cancels_total{outcome="protocol",pool="main"} 14
pgtx_cancels_total{outcome="signalled",pool="main"} 11
# HELP pgtx_cancel_pool_errors_total Cancels the cancel pool could not deliver, which then fell back.
# TYPE pgtx_cancel_pool_errors_total counter
pgtx_cancel_pool_errors_total{pool="main"} 13
# HELP pgtx_cancel_latency_seconds Time from a context's end to the cancel's answer.
# TYPE pgtx_cancel_latency_seconds histogram
pgtx_cancel_latency_seconds_bucket{pool="main",le="1"} 10
pgtx_cancel_latency_seconds_bucket{pool="main",le="+Inf"} 16
pgtx_cancel_latency_seconds_sum{pool="main"} 17
pgtx_cancel_latency_seconds_count{pool="main"} 16
# HELP pgtx_commit_resolutions_total Ambiguous COMMITs resolved (Config.ResolveTimeout), by result: committed, aborted, not_applied, unknown.
# TYPE pgtx_commit_resolutions_total counter
pgtx_commit_resolutions_total{pool="main",result="aborted"} 19
pgtx_commit_resolutions_total{pool="main",result="committed"} 18
pgtx_commit_resolutions_total{pool="main",result="not_applied"} 20
pgtx_commit_resolutions_total{pool="main",result="unknown"} 21
# HELP pgtx_commit_unknown_total Ambiguous COMMITs whose outcome nothing could tell, by reason: unsupported, elsewhere, restarted, forgotten, unanswered.
# TYPE pgtx_commit_unknown_total counter
pgtx_commit_unknown_total{pool="main",reason="elsewhere"} 2
pgtx_commit_unknown_total{pool="main",reason="forgotten"} 4
pgtx_commit_unknown_total{pool="main",reason="restarted"} 3
pgtx_commit_unknown_total{pool="main",reason="unanswered"} 11
pgtx_commit_unknown_total{pool="main",reason="unsupported"} 1
# HELP pgtx_failover_commit_checks_total Commits Transaction calls reported that a later run of the server (a failover, a restart) was asked about (Config.RecentCommits), by result: lost, unproven, survived.
# TYPE pgtx_failover_commit_checks_total counter
pgtx_failover_commit_checks_total{pool="main",result="lost"} 29
pgtx_failover_commit_checks_total{pool="main",result="survived"} 31
pgtx_failover_commit_checks_total{pool="main",result="unproven"} 30
# HELP pgtx_breaker_state State of the pool's circuit breaker: 1 for the state it is in (closed, half-open, open), 0 for the others.
# TYPE pgtx_breaker_state gauge
pgtx_breaker_state{pool="main",state="closed"} 0
pgtx_breaker_state{pool="main",state="half-open"} 0
pgtx_breaker_state{pool="main",state="open"} 1
# HELP pgtx_breaker_rejected_total Transaction calls the circuit breaker refused because it was open.
# TYPE pgtx_breaker_rejected_total counter
pgtx_breaker_rejected_total{pool="main"} 22
# HELP pgtx_breaker_opens_total Times the circuit breaker opened.
# TYPE pgtx_breaker_opens_total counter
pgtx_breaker_opens_total{pool="main"} 23
# HELP pgtx_contention_limit Attempts of the label the contention manager lets run at once; 0 while it does not limit them.
# TYPE pgtx_contention_limit gauge
pgtx_contention_limit{label="",pool="main"} 0
pgtx_contention_limit{label="transfer",pool="main"} 24
# HELP pgtx_contention_waiting Attempts of the label waiting at the contention manager's gate now.
# TYPE pgtx_contention_waiting gauge
pgtx_contention_waiting{label="",pool="main"} 0
pgtx_contention_waiting{label="transfer",pool="main"} 25
# HELP pgtx_contention_attempts_total Transaction attempts of the label.
# TYPE pgtx_contention_attempts_total counter
pgtx_contention_attempts_total{label="",pool="main"} 0
pgtx_contention_attempts_total{label="transfer",pool="main"} 26
# HELP pgtx_contention_conflicts_total Transaction attempts of the label that failed with a conflict (40001, 40P01).
# TYPE pgtx_contention_conflicts_total counter
pgtx_contention_conflicts_total{label="",pool="main"} 0
pgtx_contention_conflicts_total{label="transfer",pool="main"} 27
# HELP pgtx_pool_slot_refused_connects_total Connects of the pool the server or a pooler refused for lack of connection slots (53300, too many clients).
# TYPE pgtx_pool_slot_refused_connects_total counter
pgtx_pool_slot_refused_connects_total{pool="main"} 32
# HELP pgtx_pool_slot_limit Connections the pool lets itself hold: its maximum until a connect is refused for lack of slots while it holds some, then what it held, raised by each probe that connects.
# TYPE pgtx_pool_slot_limit gauge
pgtx_pool_slot_limit{pool="main"} 33
# HELP pgtx_pool_slot_probes_total Connects of the pool let through beyond its slot limit, about one every 2s while the limit is below the maximum.
# TYPE pgtx_pool_slot_probes_total counter
pgtx_pool_slot_probes_total{pool="main"} 34
# HELP pgtx_pool_slot_raises_total Probes of the pool that connected and raised its slot limit.
# TYPE pgtx_pool_slot_raises_total counter
pgtx_pool_slot_raises_total{pool="main"} 35
# HELP pgtx_pool_slot_waits_total Acquires of the pool that waited for a connection it held, instead of connecting, because the server had no slot.
# TYPE pgtx_pool_slot_waits_total counter
pgtx_pool_slot_waits_total{pool="main"} 36
# HELP pgtx_pool_slot_wait_seconds_total Total time the acquires of the pool waited for a connection it held because the server had no slot.
# TYPE pgtx_pool_slot_wait_seconds_total counter
pgtx_pool_slot_wait_seconds_total{pool="main"} 37.5
# HELP pgtx_cancel_pool_slot_refused_connects_total Connects of the cancel pool the server or a pooler refused for lack of connection slots (53300, too many clients).
# TYPE pgtx_cancel_pool_slot_refused_connects_total counter
pgtx_cancel_pool_slot_refused_connects_total{pool="main"} 38
# HELP pgtx_cancel_pool_slot_limit Connections the cancel pool lets itself hold: its maximum until a connect is refused for lack of slots while it holds some, then what it held, raised by each probe that connects.
# TYPE pgtx_cancel_pool_slot_limit gauge
pgtx_cancel_pool_slot_limit{pool="main"} 1
# HELP pgtx_cancel_pool_slot_probes_total Connects of the cancel pool let through beyond its slot limit, about one every 2s while the limit is below the maximum.
# TYPE pgtx_cancel_pool_slot_probes_total counter
pgtx_cancel_pool_slot_probes_total{pool="main"} 39
# HELP pgtx_cancel_pool_slot_raises_total Probes of the cancel pool that connected and raised its slot limit.
# TYPE pgtx_cancel_pool_slot_raises_total counter
pgtx_cancel_pool_slot_raises_total{pool="main"} 40
# HELP pgtx_cancel_pool_slot_waits_total Acquires of the cancel pool that waited for a connection it held, instead of connecting, because the server had no slot.
# TYPE pgtx_cancel_pool_slot_waits_total counter
pgtx_cancel_pool_slot_waits_total{pool="main"} 41
# HELP pgtx_cancel_pool_slot_wait_seconds_total Total time the acquires of the cancel pool waited for a connection it held because the server had no slot.
# TYPE pgtx_cancel_pool_slot_wait_seconds_total counter
pgtx_cancel_pool_slot_wait_seconds_total{pool="main"} 0.42
`
	err := testutil.CollectAndCompare(sc, strings.NewReader(want),
		"pgtx_pool_waiters", "pgtx_pool_acquire_timeouts_total", "pgtx_pool_queue_full_total",
		"pgtx_transactions_started_total", "pgtx_connection_holds_total", "pgtx_connection_hold_seconds_total",
		"pgtx_transactions_in_flight", "pgtx_transaction_oldest_in_flight_seconds",
		"pgtx_cancels_total", "pgtx_cancel_pool_errors_total", "pgtx_cancel_latency_seconds",
		"pgtx_commit_resolutions_total", "pgtx_failover_commit_checks_total", "pgtx_breaker_state", "pgtx_breaker_rejected_total", "pgtx_breaker_opens_total",
		"pgtx_contention_limit", "pgtx_contention_waiting", "pgtx_contention_attempts_total", "pgtx_contention_conflicts_total",
		"pgtx_pool_slot_refused_connects_total", "pgtx_pool_slot_limit", "pgtx_pool_slot_probes_total",
		"pgtx_pool_slot_raises_total", "pgtx_pool_slot_waits_total", "pgtx_pool_slot_wait_seconds_total",
		"pgtx_cancel_pool_slot_refused_connects_total", "pgtx_cancel_pool_slot_limit", "pgtx_cancel_pool_slot_probes_total",
		"pgtx_cancel_pool_slot_raises_total", "pgtx_cancel_pool_slot_waits_total", "pgtx_cancel_pool_slot_wait_seconds_total")
	if err != nil {
		t.Error(err)
	}
}

// gatherPedantic registers c in a pedantic registry, which checks every
// collected metric against the descriptors, and gathers it.
func gatherPedantic(t *testing.T, c prometheus.Collector) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("Gather: %v", err)
	}
}
