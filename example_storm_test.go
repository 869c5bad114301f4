package pgtx_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// Two snapshots of a pool of 4 connections, 10s apart, during the failure
// card's timeout storm: calls arrive at the usual 40 a second, but every
// transaction now holds its connection for 300ms instead of 20ms. In
// production the snapshots come from pool.Stats(), and the pool size from
// their Stats.Pool.
func ExampleDiagnose() {
	before := pgtx.Stats{
		Calls: 50_000, Held: 50_000, HoldTime: 50_000 * 20 * time.Millisecond,
		AcquireWait: pgtx.Histogram{Count: 50_000, Sum: 5 * time.Second},
	}
	after := pgtx.Stats{
		Calls: 50_400, Held: 50_133, HoldTime: before.HoldTime + 133*300*time.Millisecond,
		AcquireWait:     pgtx.Histogram{Count: 50_380, Sum: before.AcquireWait.Sum + 380*450*time.Millisecond},
		AcquireTimeouts: 247,
		Waiters:         20,
		InFlight:        4, OldestInFlight: 290 * time.Millisecond,
	}

	d := pgtx.Diagnose(before, after, 10*time.Second, pgtx.DiagnoseConfig{
		MaxConns:            4, // read from after.Pool when the snapshots come from a Pool
		BaselineArrivalRate: 40,
		BaselineHold:        20 * time.Millisecond,
	})
	fmt.Println(d.Verdict)
	fmt.Println(d.Advice)
	for _, r := range d.Reasons {
		fmt.Println("-", r)
	}
	// Output:
	// timeout storm
	// downstream is slow: shed load or open the breaker; do NOT grow the pool (it adds load to the slow database); look for the slow queries in pg_stat_activity
	// - queue depth 20: callers are waiting for a connection now
	// - 247 acquire timeouts in the interval
	// - mean acquire wait 450ms over 380 acquires (>= 5ms)
	// - utilization 3.00: 40.0 calls/s × 300ms hold / 4 conns (>= 0.9)
	// - arrival rate 40.0/s is 1.0× the baseline 40.0/s
	// - mean hold 300ms >= 60ms (3× the baseline hold 20ms): connections are held by slow queries
}

// The other case: 2000 calls a second of 2ms transactions on the same pool,
// five times the usual rate. The queries are fast; the pool is too small for
// the traffic.
func ExampleDiagnose_trafficSpike() {
	before := pgtx.Stats{Calls: 50_000, Held: 50_000, HoldTime: 50_000 * 2 * time.Millisecond}
	after := pgtx.Stats{
		Calls: 70_000, Held: 69_990, HoldTime: 69_990 * 2 * time.Millisecond,
		AcquireWait: pgtx.Histogram{Count: 19_990, Sum: 19_990 * 30 * time.Millisecond},
		Waiters:     50,
	}
	d := pgtx.Diagnose(before, after, 10*time.Second, pgtx.DiagnoseConfig{MaxConns: 4, BaselineArrivalRate: 400})
	fmt.Println(d)
	fmt.Println(d.Advice)
	// Output:
	// traffic spike: arrival 2000.0/s, mean hold 2ms, queue depth 50, mean acquire wait 30ms, acquire timeouts 0, utilization 1.00 of 4 conns, oldest in flight 0s
	// queries are fast but arrivals exceed what the pool serves: more capacity (pool size, replicas) or rate limiting helps
}

// Each class of operations gets its own pool: when the reports' queries turn
// slow they hold only the reports' 2 connections, and checkout keeps its 8.
func ExampleNewBulkheads() {
	ctx := context.Background()
	cfg, err := pgtx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.AcquireTimeout = 500 * time.Millisecond
	bh, err := pgtx.NewBulkheads(ctx, cfg, map[string]pgtx.BulkheadClass{
		"checkout": {MaxConns: 8},
		"reports":  {MaxConns: 2, MaxWaiters: 4, AcquireTimeout: 100 * time.Millisecond},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer bh.Close()

	checkout, err := bh.Pool("checkout") // once, at start-up
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
	for class, s := range bh.Stats() {
		fmt.Println(class, "queue depth", s.Waiters)
	}
}
