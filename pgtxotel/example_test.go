package pgtxotel_test

import (
	"context"
	"fmt"
	"os"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxotel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Example reports a call as spans. The pool calls the Tracer's hooks; here
// they are called by hand, for a call that committed at its first attempt,
// and the spans go to an in-memory recorder.
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	tr := pgtxotel.NewTracer(
		pgtxotel.WithTracerProvider(tp),
		pgtxotel.WithMeterProvider(sdkmetric.NewMeterProvider()),
		pgtxotel.WithAttributes(attribute.String("db.namespace", "shop")),
	)
	cfg, err := pgtx.ParseConfig("postgres://app@127.0.0.1:5432/app")
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.Tracer = tr

	ctx := tr.TraceTransactionStart(context.Background(), pgtx.TraceTransactionStartData{Label: "transfer", Isolation: pgtx.Serializable})
	attempt := tr.TraceAttemptStart(ctx, pgtx.TraceAttemptStartData{Label: "transfer", Isolation: pgtx.Serializable, Attempt: 1})
	tr.TraceAttemptEnd(attempt, pgtx.TraceAttemptEndData{Label: "transfer", Isolation: pgtx.Serializable, Attempt: 1})
	tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Label: "transfer", Isolation: pgtx.Serializable, Attempts: 1})
	for _, s := range spans.Ended() {
		fmt.Println(s.Name(), s.SpanKind())
	}
	// Output:
	// pgtx.attempt internal
	// pgtx.transaction transfer internal
}

// Example_options shows which option each constructor takes.
// WithMeterProvider and WithAttributes are Options, taken by all three;
// WithTracerProvider is a TracerOption, taken by NewTracer only, as the
// pool's instruments make no span:
// pgtxotel.NewPoolTracer("main", pgtxotel.WithTracerProvider(tp)) does not
// compile.
func Example_options() {
	tp := sdktrace.NewTracerProvider()
	mp := sdkmetric.NewMeterProvider()
	db := attribute.String("db.namespace", "shop")

	tr := pgtxotel.NewTracer(pgtxotel.WithTracerProvider(tp), pgtxotel.WithMeterProvider(mp), pgtxotel.WithAttributes(db))
	pt := pgtxotel.NewPoolTracer("main", pgtxotel.WithMeterProvider(mp), pgtxotel.WithAttributes(db))
	pool, err := pgtx.New(context.Background(), "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	reg, err := pgtxotel.RegisterPoolMetrics(pool, "main", pgtxotel.WithMeterProvider(mp), pgtxotel.WithAttributes(db))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = reg.Unregister() }()
	fmt.Printf("%T, %T\n", tr, pt)
	// Output:
	// *pgtxotel.Tracer, *pgtxotel.PoolTracer
}

// Example_otelpgx runs pgtxotel beside otelpgx on one pool. otelpgx traces
// every statement as a client span, and pgtxotel's PoolTracer records the
// connection pool's wait and use times; both are pgx tracers of the pool's
// connections, combined by multitracer. pgtxotel's Tracer is pgtx's: its
// "pgtx.transaction" span (internal) holds one "pgtx.attempt" span per
// attempt, and otelpgx's spans of the statements fn runs nest under the
// attempt's.
func Example_otelpgx() {
	ctx := context.Background()

	tr := pgtxotel.NewTracer()
	pt := pgtxotel.NewPoolTracer("main")
	cfg, err := pgtx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.Tracer = tr
	cfg.ConnConfig.Tracer = multitracer.New(otelpgx.NewTracer(), pt)
	pool, err := pgtx.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	reg, err := pgtxotel.RegisterPoolMetrics(pool, "main") // the PoolTracer's name
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = reg.Unregister() }()

	err = pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "update accounts set balance = balance - 10 where id = 1")
		return err
	})
	if err != nil {
		fmt.Println("failed:", err)
	}
}
