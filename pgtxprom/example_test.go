package pgtxprom_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Example registers a Collector over a bulkhead of two pools, one per class
// of work, and serves the metrics on /metrics. Alert on pgtx_pool_waiters
// staying above 0.
func Example() {
	ctx := context.Background()
	web, err := pgtx.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Print(err)
		return
	}
	defer web.Close()
	jobs, err := pgtx.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Print(err)
		return
	}
	defer jobs.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		pgtxprom.NewCollector(web, "interactive"),
		pgtxprom.NewCollector(jobs, "batch"),
	)
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if err := http.ListenAndServe(":9090", nil); err != nil {
		log.Print(err)
	}
}

// ExampleNewTracer counts a pool's transactions by outcome, their attempts
// and retries, and the changes of state of its circuit breaker, beside the
// pool's statistics.
func ExampleNewTracer() {
	ctx := context.Background()
	cfg, err := pgtx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Print(err)
		return
	}
	metrics := pgtxprom.NewTracer(pgtxprom.WithPoolName("main"))
	cfg.Tracer = metrics
	cfg.Breaker = &pgtx.BreakerConfig{Name: "main"}
	pool, err := pgtx.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Print(err)
		return
	}
	defer pool.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, pgtxprom.NewCollector(pool, "main"))
}
