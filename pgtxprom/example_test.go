package pgtxprom_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Example exports a pool's statistics with a Collector and its calls'
// outcomes with a Tracer, both under the pool's name.
func Example() {
	ctx := context.Background()
	cfg, err := pgtx.ParseConfig("postgres://app@127.0.0.1:5432/app")
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.MaxConns = 8
	metrics := pgtxprom.NewTracer(pgtxprom.WithPoolName("main"))
	cfg.Tracer = metrics
	pool, err := pgtx.NewWithConfig(ctx, cfg) // connects on first use
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	collector, err := pgtxprom.NewCollector(pool, "main")
	if err != nil {
		fmt.Println(err)
		return
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, collector)
	// A program serves reg: http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{})).
	families, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range families {
		if f.GetName() == "pgtx_pool_max_connections" {
			m := f.GetMetric()[0]
			fmt.Println(f.GetName(), m.GetLabel()[0].GetName(), m.GetLabel()[0].GetValue(), m.GetGauge().GetValue())
		}
	}
	// Output:
	// pgtx_pool_max_connections pool main 8
}

// Example_options shows which option each constructor takes. WithNamespace
// is an Option, taken by both; WithPoolName only by NewTracer, since a
// Collector's pool name is an argument of NewCollector:
// pgtxprom.NewCollector(pool, "main", pgtxprom.WithPoolName("main")) does
// not compile.
func Example_options() {
	ctx := context.Background()
	pool, err := pgtx.New(ctx, "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	tracer := pgtxprom.NewTracer(pgtxprom.WithNamespace("shop"), pgtxprom.WithPoolName("main"))
	collector, err := pgtxprom.NewCollector(pool, "main", pgtxprom.WithNamespace("shop"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%T, %T\n", tracer, collector)
	// Output:
	// *pgtxprom.Tracer, *pgtxprom.Collector
}

// ExampleNewCollector registers one Collector per pool of a bulkhead (one
// pool per class of work), each under its class, and serves the metrics.
// Alert on pgtx_pool_waiters staying above 0.
func ExampleNewCollector() {
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
	for name, pool := range map[string]*pgtx.Pool{"interactive": web, "batch": jobs} {
		c, err := pgtxprom.NewCollector(pool, name)
		if err != nil {
			log.Print(err)
			return
		}
		reg.MustRegister(c)
	}
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if err := http.ListenAndServe(":9090", nil); err != nil {
		log.Print(err)
	}
}
