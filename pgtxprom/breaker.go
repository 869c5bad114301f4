package pgtxprom

import (
	"context"

	"github.com/pgtx-go/pgtx"
	"github.com/prometheus/client_golang/prometheus"
)

// BreakerTracer counts the changes of state of circuit breakers: it is a
// [pgtx.BreakerTracer] and a [prometheus.Collector] of one counter,
// pgtx_breaker_transitions_total{breaker, from, to}, where breaker is the
// [pgtx.BreakerConfig].Name and from and to are the states left and
// entered, as [pgtx.BreakerState.String] ("closed", "half-open", "open").
//
// The breaker's state and its openings are in [pgtx.Stats], which a
// [Collector] exports (pgtx_breaker_state, pgtx_breaker_opens_total); a
// BreakerTracer adds what a snapshot misses, every change, the short ones
// included (half-open to open and back). Set it as
// [pgtx.BreakerConfig].Tracer and register it once; one BreakerTracer may
// serve the breakers of several pools, told apart by their names. A series
// appears at its first change. It is safe for concurrent use.
type BreakerTracer struct {
	transitions *prometheus.CounterVec
}

var (
	_ pgtx.BreakerTracer   = (*BreakerTracer)(nil)
	_ prometheus.Collector = (*BreakerTracer)(nil)
)

// NewBreakerTracer returns a [BreakerTracer]. [WithNamespace] sets the
// prefix of its metric's name, as for a [Collector].
func NewBreakerTracer(opts ...Option) *BreakerTracer {
	cfg := config{namespace: DefaultNamespace}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	return &BreakerTracer{
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: cfg.namespace,
			Name:      "breaker_transitions_total",
			Help:      "Changes of state of circuit breakers, by breaker name and the states left and entered.",
		}, []string{labelBreaker, labelFrom, labelTo}),
	}
}

// TraceBreakerStateChange counts a change of state.
func (t *BreakerTracer) TraceBreakerStateChange(_ context.Context, data pgtx.TraceBreakerStateChangeData) {
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

// Describe sends the descriptor of the transitions counter.
func (t *BreakerTracer) Describe(ch chan<- *prometheus.Desc) { t.transitions.Describe(ch) }

// Collect sends the transitions counted so far.
func (t *BreakerTracer) Collect(ch chan<- prometheus.Metric) { t.transitions.Collect(ch) }
