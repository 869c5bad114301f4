package bulkhead_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/bulkhead"
)

// Each class of operations gets its own pool: when the reports' queries turn
// slow they hold only the reports' 2 connections, and checkout keeps its 8.
// A fifth report waiting for a connection is refused at once with
// pgtx.ErrQueueFull.
func Example() {
	ctx := context.Background()
	cfg, err := pgtx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.AcquireTimeout = 500 * time.Millisecond
	pools, err := bulkhead.New(ctx, &bulkhead.Config{Base: cfg, Pools: map[string]bulkhead.PoolConfig{
		"checkout": {MaxConns: 8},
		"reports":  {MaxConns: 2, MaxWaiters: 4, AcquireTimeout: 100 * time.Millisecond},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pools.Close()

	checkout, err := pools.Pool("checkout") // once, at start-up
	if err != nil {
		fmt.Println(err)
		return
	}
	err = pgtx.Transaction(ctx, checkout, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "update orders set state = 'paid' where id = $1", 42)
		return err
	})
	if err != nil {
		fmt.Println(err)
	}
	for _, name := range pools.Names() {
		fmt.Println(name, "queue depth", pools.Stats()[name].Waiting)
	}
}
