package storm_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/storm"
)

// Two snapshots of a pool of 4 connections, 10s apart, during a timeout
// storm: transactions arrive at the usual 40 a second, but each now holds its
// connection for 300ms instead of 20ms. In production the snapshots come
// from pool.Stats(), and the pool size from their Stats.Pool.
func ExampleDiagnose() {
	before := pgtx.Stats{
		TransactionCount: 50_000, HeldCount: 50_000, HeldDuration: 50_000 * 20 * time.Millisecond,
		AcquireWait: pgtx.Histogram{Count: 50_000, Duration: 5 * time.Second},
	}
	after := pgtx.Stats{
		TransactionCount: 50_400, HeldCount: 50_133, HeldDuration: before.HeldDuration + 133*300*time.Millisecond,
		AcquireWait:         pgtx.Histogram{Count: 50_380, Duration: before.AcquireWait.Duration + 380*450*time.Millisecond},
		AcquireTimeoutCount: 247,
		Waiting:             20,
		InFlight:            4, OldestInFlight: 290 * time.Millisecond,
	}

	d := storm.Diagnose(before, after, 10*time.Second, &storm.Config{
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

// The other case: 2000 transactions a second of 2ms each on the same pool,
// five times the usual rate. The queries are fast; the pool is too small for
// the traffic.
func ExampleDiagnose_trafficSpike() {
	before := pgtx.Stats{TransactionCount: 50_000, HeldCount: 50_000, HeldDuration: 50_000 * 2 * time.Millisecond}
	after := pgtx.Stats{
		TransactionCount: 70_000, HeldCount: 69_990, HeldDuration: 69_990 * 2 * time.Millisecond,
		AcquireWait: pgtx.Histogram{Count: 19_990, Duration: 19_990 * 30 * time.Millisecond},
		Waiting:     50,
	}
	d := storm.Diagnose(before, after, 10*time.Second, &storm.Config{MaxConns: 4, BaselineArrivalRate: 400})
	fmt.Println(d)
	fmt.Println(d.Advice)
	// Output:
	// traffic spike: arrival 2000.0/s, mean hold 2ms, queue depth 50, mean acquire wait 30ms, acquire timeouts 0, utilization 1.00 of 4 conns, oldest in flight 0s
	// queries are fast but arrivals exceed what the pool serves: more capacity (pool size, replicas) or rate limiting helps
}

// Diagnosing a live pool: two snapshots taken a while apart, with the same
// clock. Run it on a timer and alert on two saturated verdicts in a row.
func ExampleDiagnose_pool() {
	ctx := context.Background()
	pool, err := pgtx.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	before, t0 := pool.Stats(), time.Now()
	time.Sleep(10 * time.Second)
	d := storm.Diagnose(before, pool.Stats(), time.Since(t0), nil)
	if d.Verdict != storm.Healthy {
		fmt.Println(d)
		fmt.Println(d.Advice)
	}
}
