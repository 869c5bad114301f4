package pgtxprom

import (
	"context"
	"errors"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/failover"
	"github.com/prometheus/client_golang/prometheus"
)

// Label names and values of the Tracer's metrics.
const (
	labelClass       = "class"
	labelStatus      = "status"
	outcomeCommitted = "committed"
)

// durationBuckets are the bounds, in seconds, of the transactions'
// duration histogram: those OpenTelemetry's semantic conventions advise
// for db.client.operation.duration, so the two agree.
var durationBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}

// attemptBuckets are the bounds of the attempts-per-transaction histogram:
// one attempt, a retry or two, and up to the default MaxRetries (10) and
// past it.
var attemptBuckets = []float64{1, 2, 3, 4, 6, 8, 11}

// Tracer counts, as Prometheus metrics, what pgtx does for every
// transaction: how calls end (pgtx_transactions_total{outcome}), their
// duration and attempts, the retries by class and their backoff, the
// retries the budget refused, every breaker transition, the commits a
// failover lost and whether the server acknowledges commits no standby
// has. docs/observability.md lists its metrics. It is a
// [pgtx.TransactionTracer], a [pgtx.BreakerTracer], a [failover.Tracer]
// and a [prometheus.Collector]: set it as the pool's [pgtx.Config].Tracer
// and register it, beside the pool's [Collector].
//
// Metrics have the label pool when [WithPoolName] names the pool, and the
// transactions' ones the label label ([pgtx.Options].Label): keep labels
// few, one per kind of transaction. A series appears once it has something
// to count. It is safe for concurrent use; one Tracer serves one pool.
type Tracer struct {
	transactions *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	attempts     *prometheus.HistogramVec
	retries      *prometheus.CounterVec
	backoff      *prometheus.CounterVec
	refusals     *prometheus.CounterVec
	transitions  *prometheus.CounterVec
	commitsLost  *prometheus.CounterVec
	asynchronous *prometheus.GaugeVec
}

var (
	_ pgtx.TransactionTracer = (*Tracer)(nil)
	_ pgtx.BreakerTracer     = (*Tracer)(nil)
	_ failover.Tracer        = (*Tracer)(nil)
	_ prometheus.Collector   = (*Tracer)(nil)
)

// NewTracer returns a [Tracer] configured by opts: [WithPoolName] names
// its pool, [WithNamespace] sets the prefix of its metrics' names.
func NewTracer(opts ...TracerOption) *Tracer {
	cfg := config{namespace: DefaultNamespace}
	for _, opt := range opts {
		if opt != nil {
			opt.applyTracer(&cfg)
		}
	}
	var constLabels prometheus.Labels
	if cfg.pool != "" {
		constLabels = prometheus.Labels{labelPool: cfg.pool}
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: cfg.namespace, Name: name, Help: help, ConstLabels: constLabels,
		}, append([]string{labelLabel}, labels...))
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: cfg.namespace, Name: name, Help: help, ConstLabels: constLabels, Buckets: buckets,
		}, append([]string{labelLabel}, labels...))
	}
	return &Tracer{
		transactions: counter("transactions_total",
			"Transaction calls ended, by outcome: committed, or the class of the error returned.", labelOutcome),
		duration: histogram("transaction_duration_seconds",
			"Wall time of Transaction calls, retries and backoffs included, by outcome.", durationBuckets, labelOutcome),
		attempts: histogram("transaction_attempts",
			"Attempts per Transaction call.", attemptBuckets),
		retries: counter("retries_total",
			"Transaction attempts run again, by the class of the error that ended the attempt before.", labelClass),
		backoff: counter("retry_backoff_seconds_total",
			"Time the retries waited before they ran, by the class of the error retried.", labelClass),
		refusals: counter("retry_budget_refusals_total",
			"Retries the pool's retry budget refused."),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: cfg.namespace, Name: "breaker_transitions_total", ConstLabels: constLabels,
			Help: "Changes of state of circuit breakers, by breaker name and the states left and entered.",
		}, []string{labelBreaker, labelFrom, labelTo}),
		commitsLost: counter("commits_lost_total",
			"Commits Transaction calls reported that a later run of the server (a failover, a restart) provably does not have, by that run's answer.",
			labelStatus),
		asynchronous: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: cfg.namespace, Name: "replication_asynchronous", ConstLabels: constLabels,
			Help: "1 while the pool's server acknowledges commits that no standby has (standbys stream, none synchronous), 0 once it no longer does.",
		}, nil),
	}
}

// TraceTransactionStart returns ctx: a call's start is counted at its end.
func (t *Tracer) TraceTransactionStart(ctx context.Context, _ pgtx.TraceTransactionStartData) context.Context {
	return ctx
}

// TraceTransactionEnd counts a call's outcome, wall time and attempts.
func (t *Tracer) TraceTransactionEnd(_ context.Context, d pgtx.TraceTransactionEndData) {
	outcome := outcomeCommitted
	if d.Err != nil {
		outcome = d.Class.String()
	}
	t.transactions.WithLabelValues(d.Label, outcome).Inc()
	t.duration.WithLabelValues(d.Label, outcome).Observe(d.Duration.Seconds())
	t.attempts.WithLabelValues(d.Label).Observe(float64(d.Attempts))
}

// TraceAttemptStart returns ctx.
func (t *Tracer) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	return ctx
}

// TraceAttemptEnd counts a retry and its backoff, or a retry the budget
// refused.
func (t *Tracer) TraceAttemptEnd(_ context.Context, d pgtx.TraceAttemptEndData) {
	switch {
	case d.Retry:
		class := d.Class.String()
		t.retries.WithLabelValues(d.Label, class).Inc()
		t.backoff.WithLabelValues(d.Label, class).Add(d.Backoff.Seconds())
	case errors.Is(d.Err, pgtx.ErrRetryBudgetExhausted):
		t.refusals.WithLabelValues(d.Label).Inc()
	}
}

// Describe sends the descriptors of the Tracer's metrics.
func (t *Tracer) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range t.collectors() {
		c.Describe(ch)
	}
}

// Collect sends what the Tracer counted so far.
func (t *Tracer) Collect(ch chan<- prometheus.Metric) {
	for _, c := range t.collectors() {
		c.Collect(ch)
	}
}

func (t *Tracer) collectors() []prometheus.Collector {
	return []prometheus.Collector{t.transactions, t.duration, t.attempts, t.retries, t.backoff, t.refusals, t.transitions,
		t.commitsLost, t.asynchronous}
}

// TraceBreakerStateChange counts a change of state of the pool's circuit
// breaker.
func (t *Tracer) TraceBreakerStateChange(_ context.Context, data pgtx.TraceBreakerStateChangeData) {
	t.transitions.WithLabelValues(data.Name, breakerStateName(data.From), breakerStateName(data.To)).Inc()
}

// breakerStateName is the value of the from and to labels: the state's
// name, "unknown" for a state this package does not know.
func breakerStateName(s pgtx.BreakerState) string {
	if s < pgtx.BreakerClosed || s > pgtx.BreakerOpen {
		return "unknown"
	}
	return s.String()
}

// TraceCommitLost counts a commit a call reported that a later run of the
// server does not have, by the call's label and that run's answer.
func (t *Tracer) TraceCommitLost(_ context.Context, data failover.CommitLostData) {
	t.commitsLost.WithLabelValues(data.Label, data.Status).Inc()
}

// TraceReplication sets pgtx_replication_asynchronous.
func (t *Tracer) TraceReplication(_ context.Context, data failover.ReplicationData) {
	v := 0.0
	if data.Asynchronous {
		v = 1
	}
	t.asynchronous.WithLabelValues().Set(v)
}
