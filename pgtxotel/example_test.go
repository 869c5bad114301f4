package pgtxotel_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxotel"
	"go.opentelemetry.io/otel/attribute"
)

// Example sets a pgtxotel Tracer on a pool. The spans and metrics go to the
// global providers (otel.SetTracerProvider, otel.SetMeterProvider) unless
// WithTracerProvider and WithMeterProvider say otherwise.
func Example() {
	ctx := context.Background()

	tr := pgtxotel.NewTracer(pgtxotel.WithAttributes(attribute.String("db.namespace", "shop")))
	cfg, err := pgtx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.Tracer = tr
	pool, err := pgtx.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	// One "pgtx.transaction transfer" span, child of the span in ctx, with a
	// "pgtx.attempt" span per attempt.
	err = pgtx.TransactionWithOptions(ctx, pool, pgtx.Serializable, pgtx.Options{Label: "transfer"},
		func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "update accounts set balance = balance - $1 where id = $2", 10, 1); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "update accounts set balance = balance + $1 where id = $2", 10, 2)
			return err
		})
	if errors.Is(err, pgtx.ErrCommitUnknown) {
		fmt.Println("may have committed: check before doing it again")
	} else if err != nil {
		fmt.Println("failed:", err)
	}
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
