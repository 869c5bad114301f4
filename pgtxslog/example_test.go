package pgtxslog_test

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxslog"
	"github.com/pgtx-go/pgtx/storm"
)

// exampleLogger returns a JSON logger to stdout, from Debug, without the
// time, so that the examples' output is stable.
func exampleLogger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// The tracer is normally set as Config.Tracer (cfg.Tracer =
// pgtxslog.NewTracer(pgtxslog.WithLogger(logger))) and pgtx calls it. Here its hook is called
// directly, as pgtx does when a SERIALIZABLE transaction lost to a
// concurrent one and is about to run again. The JSON handler writes
// durations in nanoseconds.
func Example() {
	tracer := pgtxslog.NewTracer(pgtxslog.WithLogger(exampleLogger()))

	tracer.TraceAttemptEnd(context.Background(), pgtx.TraceAttemptEndData{
		Label:     "transfer",
		Isolation: pgtx.Serializable,
		Attempt:   1,
		Err: &pgconn.PgError{
			Severity: "ERROR",
			Code:     pgerrcode.SerializationFailure,
			Message:  "could not serialize access due to concurrent update",
		},
		Class:    pgtx.ClassConflict,
		Duration: 4 * time.Millisecond,
		Retry:    true,
		Backoff:  3 * time.Millisecond,
	})
	// Output:
	// {"level":"DEBUG","msg":"retrying transaction","err":"ERROR: could not serialize access due to concurrent update (SQLSTATE 40001)","pgtx":{"label":"transfer","isolation":"SERIALIZABLE","attempt":1,"class":"conflict","sqlstate":"40001","backoff":3000000,"duration":4000000}}
}

// ExampleNewTracer sets the tracer on a pool's Config, under the logger's group
// "db": committed calls are logged at Info, conflict retries not at all.
func ExampleNewTracer() {
	ctx := context.Background()
	cfg, err := pgtx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		slog.Error("config", "err", err)
		return
	}
	cfg.Tracer = pgtxslog.NewTracer(
		pgtxslog.WithLogger(slog.Default().WithGroup("db")),
		pgtxslog.WithLevels(map[pgtxslog.Event]slog.Leveler{
			pgtxslog.Committed:     slog.LevelInfo,
			pgtxslog.RetryConflict: pgtxslog.LevelOff,
		}),
	)
	pool, err := pgtx.NewWithConfig(ctx, cfg)
	if err != nil {
		slog.Error("connect", "err", err)
		return
	}
	defer pool.Close()
}

// A snapshot of a pool's statistics, logged as one attribute. In
// production it comes from pool.Stats(), on a timer.
func ExampleStats() {
	logger := exampleLogger()
	s := pgtx.Stats{
		Waiting:        3,
		InFlight:       8,
		OldestInFlight: 120 * time.Millisecond,
		AcquireWait: pgtx.Histogram{
			Count: 4, Duration: 20 * time.Millisecond, Max: 10 * time.Millisecond,
			Bounds:  []time.Duration{time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond},
			Buckets: []int64{1, 1, 2, 0},
		},
		AcquireTimeoutCount: 1,
		TransactionCount:    1200,
		HeldCount:           1190,
		HeldDuration:        1190 * 5 * time.Millisecond,
		Breaker:             &pgtx.BreakerStats{Name: "main", State: pgtx.BreakerClosed, CallCount: 40, FailureCount: 2},
		Contention:          []pgtx.ContentionStats{{}, {Label: "transfer", Limiting: true, Limit: 4, Running: 4, Waiting: 6}},
	}
	logger.Info("pool", "stats", pgtxslog.Stats(s))
	// Output:
	// {"level":"INFO","msg":"pool","stats":{"waiting":3,"in_flight":8,"oldest_in_flight":120000000,"acquire_wait":{"count":4,"mean":5000000,"p99":10000000,"max":10000000},"acquire_timeouts":1,"queue_full":0,"transactions":1200,"held":1190,"held_mean":5000000,"breaker":{"name":"main","state":"closed","calls":40,"failures":2,"slow":0,"rejected":0,"opened":0},"contention":{"transfer":{"limit":4,"running":4,"waiting":6}}}}
}

// A storm diagnosis logged with its figures, from the snapshots of
// storm's example: a pool of 4 connections whose transactions now hold
// their connection for 300ms instead of 20ms.
func ExampleDiagnosis() {
	logger := exampleLogger()
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
	d := storm.Diagnose(before, after, 10*time.Second, &storm.Config{MaxConns: 4})
	if d.Verdict != storm.Healthy {
		logger.Warn("pool saturated", "diagnosis", pgtxslog.Diagnosis(d))
	}
	// Output:
	// {"level":"WARN","msg":"pool saturated","diagnosis":{"verdict":"timeout storm","interval":10000000000,"arrival_rate":40,"mean_hold":300000000,"waiting":20,"mean_acquire_wait":450000000,"acquire_timeouts":247,"queue_full":0,"utilization":3,"max_conns":4,"in_flight":4,"oldest_in_flight":290000000,"advice":"downstream is slow: shed load or open the breaker; do NOT grow the pool (it adds load to the slow database); look for the slow queries in pg_stat_activity","reasons":["queue depth 20: callers are waiting for a connection now","247 acquire timeouts in the interval","mean acquire wait 450ms over 380 acquires (>= 5ms)","utilization 3.00: 40.0 calls/s × 300ms hold / 4 conns (>= 0.9)","mean hold 300ms >= 100ms (default SlowHold): connections are held by slow queries"]}}
}
