package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
)

// fleetWorkerArg is the hidden first argument that makes the bench's
// binary one process of a fleet (fleetWorker) instead of the bench.
const fleetWorkerArg = "fleet-worker"

// The workload of a fleet's process and the pgxpool loop's retries.
const (
	fleetUpdate      = "update bench_fleet set n = n + 1 where id = $1"
	fleetCallTimeout = 2 * time.Second
	fleetLoopTries   = 3
	fleetLoopPause   = 100 * time.Millisecond
)

// The fleet's contenders, as the workers take them and the tables name them.
const (
	fleetPgtx = "pgtx"
	fleetLoop = "pgxpool loop"
)

// fleetWorkerConfig is what one worker process is told by its flags.
type fleetWorkerConfig struct {
	contender string
	dsn       string
	conns     int
	workers   int
	rows      int
	start     time.Time // when the workers begin, the same for the whole fleet
	dur       time.Duration
	failures  int // failed calls to report with their times
}

// parseWorkerArgs parses a worker's flags.
func parseWorkerArgs(args []string, stderr io.Writer) (fleetWorkerConfig, error) {
	var c fleetWorkerConfig
	fs := flag.NewFlagSet(fleetWorkerArg, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.contender, "contender", fleetPgtx, "pgtx or \"pgxpool loop\"")
	fs.StringVar(&c.dsn, "dsn", "", "the server")
	fs.IntVar(&c.conns, "conns", 4, "the pool's MaxConns")
	fs.IntVar(&c.workers, "workers", 4, "closed-loop workers")
	fs.IntVar(&c.rows, "rows", 1000, "rows of the table")
	start := fs.Int64("start", 0, "when to begin, in Unix nanoseconds (0: now)")
	fs.DurationVar(&c.dur, "dur", 10*time.Second, "how long to run")
	fs.IntVar(&c.failures, "failures", 0, "failed calls to report with their times")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.contender != fleetPgtx && c.contender != fleetLoop:
		return c, fmt.Errorf("-contender %q: want %q or %q", c.contender, fleetPgtx, fleetLoop)
	case c.dsn == "":
		return c, errors.New("-dsn is required")
	case c.conns < 1 || c.workers < 1 || c.rows < 1:
		return c, errors.New("-conns, -workers and -rows must be positive")
	case c.dur <= 0 || c.failures < 0:
		return c, errors.New("-dur must be positive, -failures not negative")
	}
	c.start = time.Now()
	if *start != 0 {
		c.start = time.Unix(0, *start)
	}
	return c, nil
}

// fleetWorker is one process of a fleet: it opens its pool, runs its
// workers from the fleet's start for the run's duration, and prints its
// fleetReport as one JSON line on stdout. It returns the exit status.
func fleetWorker(args []string, stdout, stderr io.Writer) int {
	c, err := parseWorkerArgs(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench fleet-worker:", err)
		return 2
	}
	r, err := runFleetWorker(context.Background(), c)
	if err != nil {
		fmt.Fprintln(stderr, "bench fleet-worker:", err)
		return 1
	}
	if err := json.NewEncoder(stdout).Encode(r); err != nil {
		fmt.Fprintln(stderr, "bench fleet-worker:", err)
		return 1
	}
	return 0
}

// runFleetWorker runs the workers of one process against its own pool.
func runFleetWorker(ctx context.Context, c fleetWorkerConfig) (fleetReport, error) {
	call, stats, closePool, err := openFleetPool(ctx, c)
	if err != nil {
		return fleetReport{}, err
	}
	defer closePool()
	if wait := time.Until(c.start); wait > 0 {
		time.Sleep(wait)
	}
	end := c.start.Add(c.dur)
	seconds := max(1, int((c.dur+time.Second-1)/time.Second))
	reports := make([]fleetReport, c.workers)
	var wg sync.WaitGroup
	for w := range reports {
		wg.Go(func() {
			r := &reports[w]
			r.Errors = map[string]int64{}
			r.PerSecond = make([]int64, seconds)
			r.CommitsPerSecond = make([]int64, seconds)
			for time.Now().Before(end) {
				id := rand.IntN(c.rows) + 1
				t0 := time.Now()
				cctx, cancel := context.WithTimeout(ctx, fleetCallTimeout)
				err := call(cctx, id)
				cancel()
				if err == nil {
					r.Commits++
					r.CommitsPerSecond[min(seconds-1, max(0, int(time.Since(c.start)/time.Second)))]++
					continue
				}
				t1 := time.Now()
				r.Failed++
				text := errorText(err)
				countErrors(r.Errors, text, 1)
				r.PerSecond[min(seconds-1, max(0, int(t1.Sub(c.start)/time.Second)))]++
				if len(r.Failures) < c.failures {
					r.Failures = append(r.Failures, fleetFailure{Start: t0.UnixNano(), End: t1.UnixNano(), Err: text})
				} else {
					r.Unrecorded++
				}
			}
		})
	}
	wg.Wait()
	s := sumReports(reports)
	out := fleetReport{Contender: c.contender, Commits: s.Commits, Failed: s.Failed, PerSecond: s.PerSecond, CommitsPerSecond: s.Commits1s,
		Failures: s.Failures, Unrecorded: s.Unrecorded, Pool: stats()}
	if len(s.Errors) > 0 {
		out.Errors = map[string]int64{}
		for _, e := range topErrors(s.Errors, len(s.Errors)) {
			countErrors(out.Errors, e.Text, e.Count)
		}
	}
	return out, nil
}

// openFleetPool opens the contender's pool of c.conns connections; call
// runs one update through it, stats reads its statistics.
func openFleetPool(ctx context.Context, c fleetWorkerConfig) (call func(context.Context, int) error, stats func() fleetPoolStats, closePool func(), err error) {
	if c.contender == fleetPgtx {
		p, err := newPgtxPool(ctx, c.dsn, c.conns, nil)
		if err != nil {
			return nil, nil, nil, err
		}
		call = func(ctx context.Context, id int) error {
			return pgtx.Transaction(ctx, p, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, fleetUpdate, id)
				return err
			})
		}
		stats = func() fleetPoolStats {
			st := p.Stats()
			s := pgxpoolStats(st.Pool)
			s.Transactions, s.AcquireTimeouts, s.QueueFull = st.TransactionCount, st.AcquireTimeoutCount, st.QueueFullCount
			s.AcquireWaitCount = st.AcquireWait.Count
			s.SlotRefused, s.SlotLimit, s.SlotProbes = st.Slots.RefusedCount, int64(st.Slots.Limit), st.Slots.ProbeCount
			s.SlotWaits, s.SlotWaitNanos = st.Slots.WaitCount, int64(st.Slots.WaitDuration)
			return s
		}
		return call, stats, p.Close, nil
	}
	p, err := newPgxPool(ctx, c.dsn, c.conns, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	call = func(ctx context.Context, id int) error { return fleetLoopCall(ctx, p, id) }
	stats = func() fleetPoolStats { return pgxpoolStats(p.Stat()) }
	return call, stats, p.Close, nil
}

// fleetLoopCall is the usual hand-written loop over pgxpool: up to
// fleetLoopTries tries, fleetLoopPause apart, retrying serialization
// failures, deadlocks, too_many_connections and failed connects.
func fleetLoopCall(ctx context.Context, p *pgxpool.Pool, id int) error {
	for try := 1; ; try++ {
		err := pgx.BeginTxFunc(ctx, p, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, fleetUpdate, id)
			return err
		})
		if err == nil || try >= fleetLoopTries || !fleetLoopRetryable(err) {
			return err
		}
		t := time.NewTimer(fleetLoopPause)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// fleetLoopRetryable is what the loop retries: what the other loops do
// (40001, 40P01, 53300) and any connect error.
func fleetLoopRetryable(err error) bool {
	var connErr *pgconn.ConnectError
	return errors.As(err, &connErr) || loopRetryable(err)
}

// pgxpoolStats reads a pgxpool's statistics; nil reads as zero.
func pgxpoolStats(st *pgxpool.Stat) fleetPoolStats {
	if st == nil {
		return fleetPoolStats{}
	}
	return fleetPoolStats{
		MaxConns: int64(st.MaxConns()), TotalConns: int64(st.TotalConns()),
		AcquireCount: st.AcquireCount(), EmptyAcquire: st.EmptyAcquireCount(),
		CanceledAcquire: st.CanceledAcquireCount(), NewConns: st.NewConnsCount(),
	}
}
