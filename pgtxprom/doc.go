// Package pgtxprom exports pgtx pools and transactions as Prometheus
// metrics, under Prometheus' naming rules, so that a dashboard built on
// pgxpool's collectors carries over.
//
// A [Collector] exports what a pool counts itself, [pgtx.Stats], reading it
// at each collection, so nothing is counted on the transactions' path:
// the pool and its queue depth, the connection slots it learned the server
// has (pool_slot_*, cancel_pool_slot_*), cancels, resolutions of ambiguous
// COMMITs, the breaker and the contention manager. A [Tracer], set as the pool's
// [pgtx.Config].Tracer, counts what only the events know: how calls end,
// their attempts, retries and backoff, budget refusals, every breaker
// transition and the commits a failover lost. Make one of each per pool,
// under the pool's name, and register both:
//
//	metrics := pgtxprom.NewTracer(pgtxprom.WithPoolName("main"))
//	cfg.Tracer = metrics
//	pool, err := pgtx.NewWithConfig(ctx, cfg)
//	collector, err := pgtxprom.NewCollector(pool, "main")
//	reg.MustRegister(metrics, collector)
//
// Pool names must be unique in a registry; to tell apart the pools of
// several databases or services, wrap the registerer with
// prometheus.WrapRegistererWith and a constant label. [WithNamespace] is
// taken by both constructors, [WithPoolName] by [NewTracer] only.
//
// The directory dashboard holds a Grafana dashboard over these metrics,
// checked against them by a test. The repository's docs/observability.md
// lists every metric.
package pgtxprom
