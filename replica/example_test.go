package replica_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/replica"
)

// A router over one replica, which has a circuit breaker of its own: while
// the replica fails, reads skip it and go to the primary at no cost.
func Example() {
	ctx := context.Background()
	primary, err := pgtx.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer primary.Close()

	cfg, err := pgtx.ParseConfig(os.Getenv("REPLICA_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.Breaker = &pgtx.BreakerConfig{Name: "replica", SlowCallThreshold: 200 * time.Millisecond}
	cfg.CancelGrace = 100 * time.Millisecond // a read that falls back should not wait for the replica
	rp, err := pgtx.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rp.Close()

	router, err := replica.New(primary, []*pgtx.Pool{rp}, &replica.Config{ReplicaTimeout: 300 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	var name string
	err = router.Read(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, "select name from items where id = $1", 42).Scan(&name)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(name, router.Stats())
}

// A report that needs one snapshot over several queries reads at REPEATABLE
// READ, with its own statement timeout and a label for traces.
func ExampleRouter_ReadWithOptions() {
	ctx := context.Background()
	primary, err := pgtx.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer primary.Close()
	rp, err := pgtx.New(ctx, os.Getenv("REPLICA_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rp.Close()
	router, err := replica.New(primary, []*pgtx.Pool{rp}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	var orders, total int64
	opts := pgtx.Options{Label: "daily report", StatementTimeout: 10 * time.Second}
	err = router.ReadWithOptions(ctx, pgtx.RepeatableRead, opts, func(ctx context.Context, tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "select count(*) from orders where day = current_date").Scan(&orders); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "select coalesce(sum(amount), 0) from orders where day = current_date").Scan(&total)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(orders, total)
}
