package pgtxotel_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxotel"
	"go.opentelemetry.io/otel/attribute"
)

// Example sets a pgtxotel Tracer on a pool. The spans and metrics go to the
// global providers (otel.SetTracerProvider, otel.SetMeterProvider) unless
// WithTracerProvider and WithMeterProvider say otherwise.
func Example() {
	ctx := context.Background()

	tr, err := pgtxotel.New(pgtxotel.WithAttributes(attribute.String("db.namespace", "shop")))
	if err != nil {
		fmt.Println(err)
		return
	}
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
	// "pgtx.attempt" event per attempt.
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
