// Command overload shows pgtx's retry budget at work against a server that
// sheds load.
//
// A server-side admission function, overload_admit(n), raises 53300
// (too_many_connections, as a pooler or an ingress limiter would) when more
// than n of its own statements are running, and otherwise sleeps 5ms: the
// server serves at most n statements at a time, about n/5ms per second. The
// program sends transactions calling it at a fixed arrival rate above that
// capacity (an open loop: arrivals do not wait for earlier calls, as with
// independent users), for a few seconds, twice:
//
//   - with pgtx's default retry budget: over the last 10s, overload retries
//     may not exceed 20% of the successful calls plus 10 per second; a retry
//     beyond that is refused and the call returns at once, with an error
//     matching pgtx.ErrRetryBudgetExhausted;
//   - with the budget off (Retry.BudgetRatio -1): every call
//     that meets 53300 retries up to Retry.MaxAdaptiveRetries (2) times.
//
// Per run it prints the calls, successes, attempts per call, budget
// refusals and latency, then what the budget did. It uses DATABASE_URL when
// set, otherwise it starts a throwaway PostgreSQL and removes it at the end.
// It exits non-zero if the budget refuses nothing, or if the run with the
// budget makes as many attempts per call as the run without.
//
//	go run ./examples/overload           # 5s per run
//	go run ./examples/overload -short    # 1.5s per run (for CI)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// admitSQL creates the admission function. It counts the running calls of
// itself in pg_stat_activity (its own included) and sheds with 53300 above
// the limit.
const admitSQL = `create or replace function overload_admit(lim int) returns void language plpgsql as $$
	begin
		if (select count(*) from pg_stat_activity
		    where state = 'active' and query like 'select overload_admit(%') > lim then
			raise exception 'server busy: more than % admitted statements', lim using errcode = '53300';
		end if;
		perform pg_sleep(0.005);
	end $$`

// options are the knobs of a run.
type options struct {
	dur         time.Duration // how long arrivals continue, per run
	rate        float64       // arrivals per second
	limit       int           // statements the server admits at a time
	conns       int32         // pool size
	callTimeout time.Duration // each call's deadline
}

func main() {
	var o options
	short := flag.Bool("short", false, "1.5s per run (for CI)")
	flag.DurationVar(&o.dur, "dur", 5*time.Second, "how long each run sends calls")
	flag.Float64Var(&o.rate, "rate", 1000, "arrivals per second (open loop)")
	flag.IntVar(&o.limit, "limit", 2, "statements the server admits at a time")
	conns := flag.Int("conns", 16, "pool size")
	flag.DurationVar(&o.callTimeout, "timeout", time.Second, "each call's deadline")
	flag.Parse()
	if *short {
		o.dur = 1500 * time.Millisecond
	}
	o.conns = int32(*conns)
	if o.dur <= 0 || o.rate <= 0 || o.rate > 20000 || o.limit < 1 || *conns < 1 || *conns > 200 || o.callTimeout <= 0 {
		fmt.Fprintln(os.Stderr, "overload: need -dur > 0, 0 < -rate <= 20000, -limit >= 1, 1 <= -conns <= 200, -timeout > 0")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "overload: interrupted")
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(1)
	}
}

// run sets up the server, runs the storm with and without the budget,
// explains the difference and checks it.
func run(ctx context.Context, o options) error {
	dsn, cleanup, err := server.DatabaseURL(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := setup(ctx, dsn); err != nil {
		return err
	}

	capacity := float64(o.limit) / 0.005
	fmt.Printf("overload: the server admits %d statements at a time, each 5ms: at most ~%.0f calls/s\n", o.limit, capacity)
	fmt.Printf("overload: %.0f arrivals/s for %v per run (open loop), a pool of %d, %v per call\n\n",
		o.rate, o.dur, o.conns, o.callTimeout)

	on, err := storm(ctx, dsn, o, 0)
	if err != nil {
		return err
	}
	on.print("budget on (default)")
	off, err := storm(ctx, dsn, o, -1)
	if err != nil {
		return err
	}
	off.print("budget off")
	explain(on, off)
	return check(on, off)
}

// setup creates the admission function.
func setup(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, admitSQL)
	return err
}

// result is what one run observed.
type result struct {
	elapsed                                time.Duration
	calls, ok, refused, shed, timedOut     int64
	attempts, overloadAttempts, retries    int64
	latencies, okLatencies, refusedLatency []time.Duration
}

// counter is a run's pool tracer: attempts, attempts the server shed, and
// retries.
type counter struct {
	attempts, shed, retries atomic.Int64
}

// TraceTransactionStart does nothing: the counter counts attempts.
func (c *counter) TraceTransactionStart(ctx context.Context, _ pgtx.TraceTransactionStartData) context.Context {
	return ctx
}

// TraceTransactionEnd does nothing.
func (c *counter) TraceTransactionEnd(context.Context, pgtx.TraceTransactionEndData) {}

// TraceAttemptStart counts an attempt.
func (c *counter) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	c.attempts.Add(1)
	return ctx
}

// TraceAttemptEnd counts the attempts the server shed and the retries.
func (c *counter) TraceAttemptEnd(_ context.Context, d pgtx.TraceAttemptEndData) {
	if d.Class == pgtx.ClassOverload {
		c.shed.Add(1)
	}
	if d.Retry {
		c.retries.Add(1)
	}
}

// storm opens a pool with the given budget, sends calls at o.rate for
// o.dur, waits for every call to end, and returns the counts.
func storm(ctx context.Context, dsn string, o options, budgetRatio float64) (*result, error) {
	tr := &counter{}
	cfg, err := pgtx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = o.conns
	cfg.Retry.BudgetRatio = budgetRatio
	cfg.Tracer = tr
	pool, err := pgtx.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	var mu sync.Mutex
	r := &result{}
	var wg sync.WaitGroup
	start := time.Now()
	arrivals(ctx, o, func() {
		wg.Go(func() {
			began := time.Now()
			err := call(ctx, pool, o)
			r.record(&mu, time.Since(began), err)
		})
	})
	wg.Wait() // every call ends by its own deadline
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.elapsed = time.Since(start)
	r.attempts, r.overloadAttempts, r.retries = tr.attempts.Load(), tr.shed.Load(), tr.retries.Load()
	return r, nil
}

// arrivals calls launch o.rate times per second for o.dur, whatever the
// earlier calls are doing: it catches up on the arrivals due every
// millisecond rather than pacing one by one.
func arrivals(ctx context.Context, o options, launch func()) {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	start := time.Now()
	launched := 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			elapsed := now.Sub(start)
			if elapsed >= o.dur {
				return
			}
			for due := int(elapsed.Seconds() * o.rate); launched < due; launched++ {
				launch()
			}
		}
	}
}

// call is one request: a transaction that passes the server's admission.
func call(ctx context.Context, pool *pgtx.Pool, o options) error {
	ctx, cancel := context.WithTimeout(ctx, o.callTimeout)
	defer cancel()
	return pgtx.TransactionWithOptions(ctx, pool, pgtx.ReadCommitted, pgtx.Options{Label: "admit"},
		func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "select overload_admit($1)", o.limit)
			return err
		})
}

// record counts one call's outcome.
func (r *result) record(mu *sync.Mutex, d time.Duration, err error) {
	mu.Lock()
	defer mu.Unlock()
	r.calls++
	r.latencies = append(r.latencies, d)
	switch {
	case err == nil:
		r.ok++
		r.okLatencies = append(r.okLatencies, d)
	case errors.Is(err, pgtx.ErrRetryBudgetExhausted):
		r.refused++
		r.refusedLatency = append(r.refusedLatency, d)
	case pgtx.Classify(err) == pgtx.ClassOverload:
		r.shed++ // 53300 on every attempt the per-call cap allowed
	default:
		r.timedOut++ // the call's deadline, or the pool's acquire timeout
	}
}

// print prints a run's counts and latencies.
func (r *result) print(title string) {
	for _, l := range [][]time.Duration{r.latencies, r.okLatencies, r.refusedLatency} {
		slices.Sort(l)
	}
	secs := r.elapsed.Seconds()
	fmt.Printf("%s:\n", title)
	fmt.Printf("  calls                %d\n", r.calls)
	fmt.Printf("  succeeded            %d (%.0f/s)\n", r.ok, float64(r.ok)/secs)
	fmt.Printf("  attempts             %d (%.2f per call, %.0f/s sent to the server); %d shed with 53300\n",
		r.attempts, ratio(r.attempts, r.calls), float64(r.attempts)/secs, r.overloadAttempts)
	fmt.Printf("  retries              %d\n", r.retries)
	fmt.Printf("  refused by budget    %d (errors.Is(err, pgtx.ErrRetryBudgetExhausted)), p50 %v\n",
		r.refused, percentile(r.refusedLatency, 0.5))
	fmt.Printf("  failed with 53300    %d (2 overload retries spent, or no time left for the backoff)\n", r.shed)
	fmt.Printf("  timed out            %d (call deadline or pool acquire timeout)\n", r.timedOut)
	fmt.Printf("  latency, all calls   p50 %v, p99 %v\n", percentile(r.latencies, 0.5), percentile(r.latencies, 0.99))
	fmt.Printf("  latency, successes   p50 %v, p99 %v\n\n", percentile(r.okLatencies, 0.5), percentile(r.okLatencies, 0.99))
}

// explain says in words what the budget changed.
func explain(on, off *result) {
	fmt.Println("What the budget did:")
	fmt.Printf("  Without it, every call that met 53300 retried up to twice: %d retries, %.2f attempts per call,\n",
		off.retries, ratio(off.attempts, off.calls))
	fmt.Printf("  %.0f attempts/s sent to a server that was already refusing work; %d calls failed with 53300\n",
		float64(off.attempts)/off.elapsed.Seconds(), off.shed)
	fmt.Printf("  all the same, %d timed out, and the median call took %v (the backoffs, and the longer queue\n",
		off.timedOut, percentile(off.latencies, 0.5))
	fmt.Printf("  for the pool's connections that the retries make).\n")
	fmt.Printf("  With it, retries were held to about 20%% of the successes plus 10/s: %d retries, %.2f attempts\n",
		on.retries, ratio(on.attempts, on.calls))
	fmt.Printf("  per call, %.0f attempts/s. %d calls were refused a retry: they failed after their first attempt,\n",
		float64(on.attempts)/on.elapsed.Seconds(), on.refused)
	fmt.Printf("  without a backoff, with ErrRetryBudgetExhausted (the 53300 still reachable); %d timed out and the\n", on.timedOut)
	fmt.Printf("  median call took %v.\n", percentile(on.latencies, 0.5))
	fmt.Printf("  Successes: %.0f/s with the budget, %.0f/s without (%d and %d in all; the run without goes on\n",
		float64(on.ok)/on.elapsed.Seconds(), float64(off.ok)/off.elapsed.Seconds(), on.ok, off.ok)
	fmt.Printf("  succeeding while its retries drain). The budget does not make the server serve more; it\n")
	fmt.Printf("  stops the client from multiplying its load while the server says it has too much, and fails\n")
	fmt.Printf("  the calls it cannot serve quickly instead of late.\n")
}

// check returns an error when the runs did not show the budget working.
func check(on, off *result) error {
	switch {
	case on.calls == 0 || off.calls == 0:
		return errors.New("no calls were made")
	case on.overloadAttempts == 0:
		return errors.New("the server never shed a call: raise -rate or lower -limit")
	case on.refused == 0:
		return errors.New("the budget never refused a retry")
	case off.refused != 0:
		return fmt.Errorf("%d calls refused by a disabled budget", off.refused)
	case ratio(on.attempts, on.calls) >= ratio(off.attempts, off.calls):
		return fmt.Errorf("attempts per call: %.3f with the budget, %.3f without; want fewer with it",
			ratio(on.attempts, on.calls), ratio(off.attempts, off.calls))
	}
	fmt.Println("\noverload: ok: the budget capped the retries sent to a shedding server")
	return nil
}

// ratio returns a/b, or 0 when b is 0.
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// percentile returns the q-quantile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))].Round(10 * time.Microsecond)
}
