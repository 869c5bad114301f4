package pgtxprom

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultNamespace is the namespace of the metrics unless WithNamespace says
// otherwise.
const DefaultNamespace = "pgtx"

// Label names and values.
const (
	labelPool    = "pool"
	labelState   = "state"
	labelOutcome = "outcome"
	labelReason  = "reason"
	labelLabel   = "label"
	labelBreaker = "breaker"
	labelFrom    = "from"
	labelTo      = "to"

	stateAcquired     = "acquired"
	stateIdle         = "idle"
	stateConstructing = "constructing"

	// The values of the outcome label of cancels_total.
	outcomeSignalled = "signalled"
	outcomeNotFound  = "not_found"
	outcomeProtocol  = "protocol"
	outcomeClosed    = "closed"
)

// config is what the options set.
type config struct {
	namespace string
	pool      string // the Tracer's pool label; "": none
}

// CollectorOption configures a [Collector] made by [NewCollector].
type CollectorOption interface {
	applyCollector(*config)
}

// TracerOption configures a [Tracer] made by [NewTracer].
type TracerOption interface {
	applyTracer(*config)
}

// Option configures both a [Collector] and a [Tracer].
type Option interface {
	CollectorOption
	TracerOption
}

// namespaceOption is the Option of WithNamespace.
type namespaceOption string

func (o namespaceOption) applyCollector(c *config) { c.namespace = string(o) }
func (o namespaceOption) applyTracer(c *config)    { c.namespace = string(o) }

// poolNameOption is the TracerOption of WithPoolName.
type poolNameOption string

func (o poolNameOption) applyTracer(c *config) { c.pool = string(o) }

// WithNamespace sets the prefix of every metric name, [DefaultNamespace] by
// default. An empty namespace leaves the names without a prefix
// (pool_waiters, ...).
func WithNamespace(ns string) Option { return namespaceOption(ns) }

// WithPoolName gives a [Tracer]'s metrics the label pool=name, the name its
// pool has in its [Collector], so that a dashboard joins the two. Without
// it the Tracer's metrics have no pool label. A Collector's pool name is
// an argument of [NewCollector].
func WithPoolName(name string) TracerOption { return poolNameOption(name) }

// Collector exports the statistics of a pgtx pool as Prometheus metrics. It
// implements [prometheus.Collector] and reads the pool's [pgtx.Stats] once
// per collection. It is safe for concurrent use. docs/observability.md
// lists its metrics.
type Collector struct {
	pool  *pgtx.Pool
	descs []*prometheus.Desc

	waiters, acquireWait, acquireTimeouts, queueFull *prometheus.Desc

	connections, maxConnections                    *prometheus.Desc
	acquires, acquireSeconds                       *prometheus.Desc
	emptyAcquires, emptyAcquireWait                *prometheus.Desc
	canceledAcquires, newConnections, destroyedCon *prometheus.Desc

	calls, inFlight, oldestInFlight, holdSeconds, holds *prometheus.Desc

	cancels, cancelPoolErrors, cancelLatency        *prometheus.Desc
	cancelPoolConnections, cancelPoolMaxConnections *prometheus.Desc

	slots, cancelSlots slotDescs

	breakerState, breakerRejected, breakerOpens *prometheus.Desc

	resolutions *prometheus.Desc
	unknown     *prometheus.Desc

	commitChecks *prometheus.Desc

	contentionLimit, contentionWaiting, contentionWait *prometheus.Desc
	contentionAttempts, contentionConflicts            *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the [Collector] of pool, whose metrics have the
// label pool=name, as [collectors.NewDBStatsCollector] names a database/sql
// pool: one Collector per pool, each registered with a
// [prometheus.Registerer] (their names must differ in one registry). A nil
// pool is an error matching [pgtx.ErrInvalidArgument]. Unregister the
// Collector before closing the pool, or it keeps reporting the pool's last
// counters.
//
// [collectors.NewDBStatsCollector]: https://pkg.go.dev/github.com/prometheus/client_golang/prometheus/collectors#NewDBStatsCollector
func NewCollector(pool *pgtx.Pool, name string, opts ...CollectorOption) (*Collector, error) {
	if pool == nil {
		return nil, fmt.Errorf("pgtxprom: NewCollector %q: nil pool: %w", name, pgtx.ErrInvalidArgument)
	}
	cfg := config{namespace: DefaultNamespace}
	for _, opt := range opts {
		if opt != nil {
			opt.applyCollector(&cfg)
		}
	}
	c := &Collector{pool: pool}
	constLabels := prometheus.Labels{labelPool: name}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		d := prometheus.NewDesc(prometheus.BuildFQName(cfg.namespace, "", name), help, labels, constLabels)
		c.descs = append(c.descs, d)
		return d
	}
	c.waiters = desc("pool_waiters",
		"Acquires of a pool connection in progress now: the queue depth. Alert on it staying above 0, not on utilisation.")
	c.acquireWait = desc("pool_acquire_wait_seconds",
		"Waits of Transaction for a pool connection.")
	c.acquireTimeouts = desc("pool_acquire_timeouts_total",
		"Waits of Transaction for a pool connection ended by the acquire timeout.")
	c.queueFull = desc("pool_queue_full_total",
		"Transaction calls refused at once because MaxWaiters callers were waiting for a connection.")

	c.connections = desc("pool_connections",
		"Connections of the pool, by state.", labelState)
	c.maxConnections = desc("pool_max_connections",
		"Maximum size of the pool.")
	c.acquireSeconds = desc("pool_acquire_seconds_total",
		"Total time of the successful acquires of a pool connection.")
	c.acquires = desc("pool_acquires_total",
		"Successful acquires of a pool connection.")
	c.emptyAcquires = desc("pool_empty_acquires_total",
		"Successful acquires that waited for a connection to be released or constructed.")
	c.emptyAcquireWait = desc("pool_empty_acquire_wait_seconds_total",
		"Time the successful acquires that found the pool empty waited.")
	c.canceledAcquires = desc("pool_canceled_acquires_total",
		"Acquires of a pool connection ended by their context.")
	c.newConnections = desc("pool_new_connections_total",
		"Connections the pool opened.")
	c.destroyedCon = desc("pool_destroyed_connections_total",
		"Connections the pool closed because of MaxConnLifetime (max_lifetime) or MaxConnIdleTime (max_idle).", labelReason)

	c.calls = desc("transactions_started_total",
		"Transaction calls started.")
	c.inFlight = desc("transactions_in_flight",
		"Transaction attempts holding a connection now.")
	c.oldestInFlight = desc("transaction_oldest_in_flight_seconds",
		"Age of the oldest Transaction attempt holding a connection now, 0 when there is none.")
	c.holdSeconds = desc("connection_hold_seconds_total",
		"Total time Transaction attempts held a connection, from BEGIN to release.")
	c.holds = desc("connection_holds_total",
		"Transaction attempts that held a connection and released it.")

	c.cancels = desc("cancels_total",
		"Statements cancelled because their context ended, by outcome.", labelOutcome)
	c.cancelPoolErrors = desc("cancel_pool_errors_total",
		"Cancels the cancel pool could not deliver, which then fell back.")
	c.cancelLatency = desc("cancel_latency_seconds",
		"Time from a context's end to the cancel's answer.")
	c.cancelPoolConnections = desc("cancel_pool_connections",
		"Connections of the cancel pool, by state.", labelState)
	c.cancelPoolMaxConnections = desc("cancel_pool_max_connections",
		"Maximum size of the cancel pool.")

	c.slots = newSlotDescs(desc, "pool_slot_", "pool")
	c.cancelSlots = newSlotDescs(desc, "cancel_pool_slot_", "cancel pool")

	c.breakerState = desc("breaker_state",
		"State of the pool's circuit breaker: 1 for the state it is in (closed, half-open, open), 0 for the others.", labelState)
	c.breakerRejected = desc("breaker_rejected_total",
		"Transaction calls the circuit breaker refused because it was open.")
	c.breakerOpens = desc("breaker_opens_total",
		"Times the circuit breaker opened.")

	c.resolutions = desc("commit_resolutions_total",
		"Ambiguous COMMITs resolved (Config.ResolveTimeout), by result: committed, aborted, not_applied, unknown.", "result")
	c.unknown = desc("commit_unknown_total",
		"Ambiguous COMMITs whose outcome nothing could tell, by reason: unsupported, elsewhere, restarted, forgotten, unanswered.", "reason")

	c.commitChecks = desc("failover_commit_checks_total",
		"Commits Transaction calls reported that a later run of the server (a failover, a restart) was asked about (Config.RecentCommits), by result: lost, unproven, survived.", "result")

	c.contentionLimit = desc("contention_limit",
		"Attempts of the label the contention manager lets run at once; 0 while it does not limit them.", labelLabel)
	c.contentionWaiting = desc("contention_waiting",
		"Attempts of the label waiting at the contention manager's gate now.", labelLabel)
	c.contentionWait = desc("contention_wait_seconds",
		"Waits at the contention manager's gate, while it limited the label.", labelLabel)
	c.contentionAttempts = desc("contention_attempts_total",
		"Transaction attempts of the label.", labelLabel)
	c.contentionConflicts = desc("contention_conflicts_total",
		"Transaction attempts of the label that failed with a conflict (40001, 40P01).", labelLabel)
	return c, nil
}

// Describe sends the descriptors of every metric the Collector can report.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect reads the pool's [pgtx.Stats] once and sends its metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.collectPool(ch, c.pool.Stats())
}

// collectPool sends the metrics of the pool's statistics s.
func (c *Collector) collectPool(ch chan<- prometheus.Metric, s pgtx.Stats) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}

	gauge(c.waiters, float64(s.Waiting))
	count, sum, buckets := histogramBuckets(s.AcquireWait)
	ch <- prometheus.MustNewConstHistogram(c.acquireWait, count, sum, buckets)
	counter(c.acquireTimeouts, float64(s.AcquireTimeoutCount))
	counter(c.queueFull, float64(s.QueueFullCount))

	if ps := s.Pool; ps != nil {
		connections(gauge, c.connections, ps)
		gauge(c.maxConnections, float64(ps.MaxConns()))
		counter(c.acquires, float64(ps.AcquireCount()))
		counter(c.acquireSeconds, ps.AcquireDuration().Seconds())
		counter(c.emptyAcquires, float64(ps.EmptyAcquireCount()))
		counter(c.emptyAcquireWait, ps.EmptyAcquireWaitTime().Seconds())
		counter(c.canceledAcquires, float64(ps.CanceledAcquireCount()))
		counter(c.newConnections, float64(ps.NewConnsCount()))
		counter(c.destroyedCon, float64(ps.MaxLifetimeDestroyCount()), "max_lifetime")
		counter(c.destroyedCon, float64(ps.MaxIdleDestroyCount()), "max_idle")
	}

	counter(c.calls, float64(s.TransactionCount))
	gauge(c.inFlight, float64(s.InFlight))
	gauge(c.oldestInFlight, s.OldestInFlight.Seconds())
	counter(c.holdSeconds, s.HeldDuration.Seconds())
	counter(c.holds, float64(s.HeldCount))

	cs := s.Cancels
	counter(c.cancels, float64(cs.SignalledCount), outcomeSignalled)
	counter(c.cancels, float64(cs.NotFoundCount), outcomeNotFound)
	counter(c.cancels, float64(cs.ProtocolCount), outcomeProtocol)
	counter(c.cancels, float64(cs.ClosedCount), outcomeClosed)
	counter(c.cancelPoolErrors, float64(cs.PoolErrorCount))
	count, sum, buckets = histogramBuckets(cs.Latency)
	ch <- prometheus.MustNewConstHistogram(c.cancelLatency, count, sum, buckets)
	if ps := s.CancelPool; ps != nil {
		connections(gauge, c.cancelPoolConnections, ps)
		gauge(c.cancelPoolMaxConnections, float64(ps.MaxConns()))
	}
	c.slots.collect(gauge, counter, s.Slots)
	if s.CancelSlots.Limit > 0 { // a cancel pool's limit is never 0
		c.cancelSlots.collect(gauge, counter, s.CancelSlots)
	}

	rs := s.Resolved
	counter(c.resolutions, float64(rs.CommittedCount), "committed")
	counter(c.resolutions, float64(rs.AbortedCount), "aborted")
	counter(c.resolutions, float64(rs.NotAppliedCount), "not_applied")
	counter(c.resolutions, float64(rs.UnknownCount), "unknown")
	counter(c.unknown, float64(rs.UnsupportedCount), "unsupported")
	counter(c.unknown, float64(rs.ElsewhereCount), "elsewhere")
	counter(c.unknown, float64(rs.RestartedCount), "restarted")
	counter(c.unknown, float64(rs.ForgottenCount), "forgotten")
	counter(c.unknown, float64(rs.UnansweredCount), "unanswered")

	counter(c.commitChecks, float64(s.LostCommitCount), "lost")
	counter(c.commitChecks, float64(s.UnprovenCommitCount), "unproven")
	counter(c.commitChecks, float64(s.SurvivedCommitCount), "survived")

	for _, cs := range s.Contention {
		gauge(c.contentionLimit, float64(cs.Limit), cs.Label)
		gauge(c.contentionWaiting, float64(cs.Waiting), cs.Label)
		count, sum, buckets := histogramBuckets(cs.Wait)
		ch <- prometheus.MustNewConstHistogram(c.contentionWait, count, sum, buckets, cs.Label)
		counter(c.contentionAttempts, float64(cs.AttemptCount), cs.Label)
		counter(c.contentionConflicts, float64(cs.ConflictCount), cs.Label)
	}

	if bs := s.Breaker; bs != nil {
		for _, st := range []pgtx.BreakerState{pgtx.BreakerClosed, pgtx.BreakerHalfOpen, pgtx.BreakerOpen} {
			gauge(c.breakerState, boolValue(bs.State == st), st.String())
		}
		counter(c.breakerRejected, float64(bs.RejectedCount))
		counter(c.breakerOpens, float64(bs.OpenedCount))
	}
}

// boolValue is 1 for true, 0 for false: the value of a state's series.
func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// connections sends a pool's connections by state.
func connections(gauge func(*prometheus.Desc, float64, ...string), d *prometheus.Desc, ps *pgxpool.Stat) {
	gauge(d, float64(ps.AcquiredConns()), stateAcquired)
	gauge(d, float64(ps.IdleConns()), stateIdle)
	gauge(d, float64(ps.ConstructingConns()), stateConstructing)
}

// histogramBuckets returns the count, the sum in seconds and the cumulative
// buckets, keyed by upper bound in seconds, of h. The count is the total of
// h's buckets (the overflow bucket included) rather than h.Count, so that it
// is never below the last cumulative bucket even when the snapshot caught an
// observation half-recorded.
func histogramBuckets(h pgtx.Histogram) (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(h.Bounds))
	var cum uint64
	for i, b := range h.Bounds {
		if i < len(h.Buckets) {
			cum += uint64(max(h.Buckets[i], 0))
		}
		buckets[b.Seconds()] = cum
	}
	for i := len(h.Bounds); i < len(h.Buckets); i++ {
		cum += uint64(max(h.Buckets[i], 0))
	}
	return cum, h.Duration.Seconds(), buckets
}
