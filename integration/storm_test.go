package integration

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/storm"
)

// warmUp opens every connection of pool, so connects do not count as waits
// in what the test measures.
func warmUp(t *testing.T, ctx context.Context, pool *pgtx.Pool) {
	t.Helper()
	conns := make([]*pgxpool.Conn, 0, pool.Stats().Pool.MaxConns())
	for range cap(conns) {
		c, err := pool.Pgxpool().Acquire(ctx)
		if err != nil {
			t.Fatalf("warm up: %v", err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

// openLoop starts call rate times a second, each in its own goroutine with
// its own deadline, until ctx ends: arrivals that do not wait for earlier
// calls to finish, like requests reaching a service. wait waits for every
// call started.
func openLoop(ctx context.Context, rate int, deadline time.Duration, call func(context.Context) error) (wait func()) {
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				wg.Go(func() {
					cctx, cancel := context.WithTimeout(ctx, deadline)
					defer cancel()
					_ = call(cctx)
				})
			}
		}
	})
	return wg.Wait
}

// closedLoop runs call in n goroutines, each calling again as soon as the
// last call returned, until ctx ends. errs counts the calls that failed
// while ctx was live.
func closedLoop(ctx context.Context, n int, call func(context.Context) error) (wait func(), errs *atomic.Int64) {
	var wg sync.WaitGroup
	errs = new(atomic.Int64)
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := call(ctx); err != nil && ctx.Err() == nil {
					errs.Add(1)
				}
			}
		})
	}
	return wg.Wait, errs
}

// statsSnapshot is a pool's Stats and when they were taken.
type statsSnapshot struct {
	stats pgtx.Stats
	at    time.Time
}

func takeStats(pool *pgtx.Pool) statsSnapshot { return statsSnapshot{pool.Stats(), time.Now()} }

// diagnose diagnoses the interval between two snapshots and logs the result.
func logDiagnosis(t *testing.T, what string, from, to statsSnapshot, cfg storm.Config) storm.Diagnosis {
	t.Helper()
	d := storm.Diagnose(from.stats, to.stats, to.at.Sub(from.at), &cfg)
	t.Logf("%s over %v: %v\n\tadvice: %s\n\t%s", what, d.Interval.Round(time.Millisecond), d, d.Advice, strings.Join(d.Reasons, "\n\t"))
	return d
}

// TestDiagnoseNamesStormAndSpike: the diagnosis names the timeout storm in a
// slow-downstream run and the traffic spike in a many-callers-fast-queries
// run, the two cases of a connection-timeout storm.
func TestDiagnoseNamesStormAndSpike(t *testing.T) {
	dsn := newDB(t)

	// A steady, modest 40 calls/s, open loop, on 4 connections. For 0.5s
	// the queries are fast; then the database turns slow (every
	// transaction sleeps 300ms on the server) while the arrival rate stays
	// the same. 4 connections serve 13 such calls a second: the rest queue
	// and give up after AcquireTimeout.
	t.Run("timeout storm", func(t *testing.T) {
		ctx := testCtx(t)
		pool := newPool(t, dsn, func(c *pgtx.Config) {
			c.MaxConns = 4
			c.AcquireTimeout = 500 * time.Millisecond
		})
		warmUp(t, ctx, pool)
		var slow atomic.Bool
		fn := func(ctx context.Context, tx pgx.Tx) error {
			q := "select 1"
			if slow.Load() {
				q = "select pg_sleep(0.3)"
			}
			_, err := tx.Exec(ctx, q)
			return err
		}
		load, stop := context.WithCancel(ctx)
		wait := openLoop(load, 40, time.Second, func(ctx context.Context) error {
			return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, fn)
		})
		t.Cleanup(func() { stop(); wait() })

		// The timers below set the length of each phase of the run; they
		// order nothing.
		s0 := takeStats(pool)
		<-time.After(500 * time.Millisecond)
		s1 := takeStats(pool)
		slow.Store(true)
		<-time.After(1500 * time.Millisecond)
		s2 := takeStats(pool)
		stop() // the calls in flight are cancelled on the server
		wait()

		normal := logDiagnosis(t, "fast queries", s0, s1, storm.Config{})
		slowDiag := logDiagnosis(t, "slow downstream", s1, s2, storm.Config{})
		baselined := logDiagnosis(t, "slow downstream against the fast run's baseline", s1, s2, storm.Config{
			BaselineArrivalRate: normal.ArrivalRate, BaselineHold: normal.MeanHold,
		})

		// Waiters is an instant reading: a caller caught taking an idle
		// connection at the statsSnapshot would count, so only a storm is
		// ruled out unconditionally.
		if normal.Verdict == storm.TimeoutStorm || (normal.Waiting == 0 && normal.Verdict != storm.Healthy) {
			t.Errorf("fast queries at 40 calls/s: %v, want healthy", normal.Verdict)
		}
		for _, d := range []storm.Diagnosis{slowDiag, baselined} {
			if d.Verdict != storm.TimeoutStorm {
				t.Errorf("slow downstream: %v, want timeout storm", d.Verdict)
			}
		}
		if slowDiag.MeanHold < 250*time.Millisecond || slowDiag.Waiting == 0 || slowDiag.AcquireTimeoutCount == 0 || slowDiag.Utilization < 1.5 {
			t.Errorf("slow downstream: mean hold %v, queue depth %d, acquire timeouts %d, utilization %.2f; want >= 250ms, > 0, > 0, >= 1.5",
				slowDiag.MeanHold, slowDiag.Waiting, slowDiag.AcquireTimeoutCount, slowDiag.Utilization)
		}
		if r := slowDiag.ArrivalRate / normal.ArrivalRate; r < 0.67 || r > 1.5 {
			t.Errorf("arrival rate %.1f/s in the storm, %.1f/s before: want the same rate", slowDiag.ArrivalRate, normal.ArrivalRate)
		}
	})

	// 64 callers in a closed loop, each calling again as soon as its fast
	// transaction (select 1) returned, on 4 connections: far more demand
	// than the pool serves, at fast query times.
	t.Run("traffic spike", func(t *testing.T) {
		ctx := testCtx(t)
		pool := newPool(t, dsn, func(c *pgtx.Config) { c.MaxConns = 4 })
		warmUp(t, ctx, pool)
		fn := func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "select 1")
			return err
		}
		load, stop := context.WithCancel(ctx)
		s0 := takeStats(pool)
		wait, errs := closedLoop(load, 64, func(ctx context.Context) error {
			return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, fn)
		})
		t.Cleanup(func() { stop(); wait() })
		<-time.After(2 * time.Second)
		s1 := takeStats(pool)
		stop()
		wait()

		spike := logDiagnosis(t, "64 callers, fast queries", s0, s1, storm.Config{})
		t.Logf("failed calls during the run: %d", errs.Load())
		if spike.Verdict != storm.TrafficSpike {
			t.Errorf("many callers, fast queries: %v, want traffic spike", spike.Verdict)
		}
		if spike.Waiting == 0 || spike.MeanHold >= defaultSlowHold || spike.MeanHold == 0 || spike.ArrivalRate < 100 {
			t.Errorf("many callers: queue depth %d, mean hold %v, arrival %.1f/s; want > 0, in (0, %v), >= 100/s",
				spike.Waiting, spike.MeanHold, spike.ArrivalRate, defaultSlowHold)
		}
	})
}
