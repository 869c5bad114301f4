package integration

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// attemptTracer counts calls and attempts and lets a test act when an
// attempt ends; it also checks that no connection is held during a backoff.
type attemptTracer struct {
	pool       atomic.Pointer[pgtx.Pool]
	onEnd      func(pgtx.TraceAttemptEndData)
	attempts   atomic.Int64
	retries    atomic.Int64
	heldDuring atomic.Int64 // retries decided while the pool still lent a connection out
	mu         sync.Mutex
	classes    []pgtx.Class
}

func (a *attemptTracer) TraceTransactionStart(ctx context.Context, _ pgtx.TraceTransactionStartData) context.Context {
	return ctx
}

func (a *attemptTracer) TraceTransactionEnd(context.Context, pgtx.TraceTransactionEndData) {}

func (a *attemptTracer) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	a.attempts.Add(1)
	return ctx
}

func (a *attemptTracer) TraceAttemptEnd(_ context.Context, d pgtx.TraceAttemptEndData) {
	if d.Retry {
		a.retries.Add(1)
		if p := a.pool.Load(); p != nil && p.Stats().Pool.AcquiredConns() != 0 {
			a.heldDuring.Add(1)
		}
	}
	a.mu.Lock()
	a.classes = append(a.classes, d.Class)
	a.mu.Unlock()
	if a.onEnd != nil {
		a.onEnd(d)
	}
}

// TestOverloadAtConnect: a server with max_connections full refuses a new
// connection with 53300 while the pool must grow. The refusal is retried with
// backoff, and the call succeeds once a slot frees; when none does, it fails
// after exactly 1 + MaxAdaptiveRetries connection attempts.
func TestOverloadAtConnect(t *testing.T) {
	ctx := testCtx(t)
	srv := server.New(t, &server.Config{Settings: map[string]string{
		"max_connections": "4", "superuser_reserved_connections": "0",
	}})
	dsn := srv.DSN("")
	var holders []*pgx.Conn
	for range 4 { // fill every slot
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, c)
	}
	t.Cleanup(func() {
		for _, c := range holders {
			_ = c.Close(context.Background())
		}
	})
	newOverloadPool := func(t *testing.T, tr *attemptTracer, connects *atomic.Int64) *pgtx.Pool {
		pool := newPool(t, dsn, func(c *pgtx.Config) {
			c.CancelMode = pgtx.CancelModeProtocol // no cancel-pool connection in the count
			c.Retry.Jitter = func() float64 { return 0.5 }
			c.Tracer = tr
			c.BeforeConnect = func(context.Context, *pgx.ConnConfig) error { connects.Add(1); return nil }
		})
		tr.pool.Store(pool)
		return pool
	}
	work := func(ctx context.Context, tx pgx.Tx) error { _, err := tx.Exec(ctx, "select 1"); return err }

	t.Run("no slot frees: 1 + MaxAdaptiveRetries connection attempts", func(t *testing.T) {
		var connects atomic.Int64
		tr := &attemptTracer{}
		pool := newOverloadPool(t, tr, &connects)
		start := time.Now()
		err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, work)
		if sqlState(err) != pgerrcode.TooManyConnections || pgtx.Classify(err) != pgtx.ClassOverload {
			t.Fatalf("err = %v, want the 53300", err)
		}
		if n := connects.Load(); n != 1+defaultMaxAdaptiveRetries {
			t.Errorf("connection attempts = %d, want %d", n, 1+defaultMaxAdaptiveRetries)
		}
		// jitter 0.5: 100ms then 200ms of backoff, not a tight loop.
		if elapsed := time.Since(start); elapsed < 300*time.Millisecond {
			t.Errorf("3 attempts in %v: the overload backoff was not applied", elapsed)
		}
	})
	t.Run("a host refusing beside the full server: unreachable first", func(t *testing.T) {
		// A connection string that names a port nobody listens on, then
		// the full server: pgconn tries both, and the last attempt's
		// error joins the refusal and the 53300. It is an overload,
		// capped by MaxAdaptiveRetries, and its message says first that
		// the server could not be reached.
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = closedPort(t) + "," + u.Host
		pool := newPool(t, u.String(), func(c *pgtx.Config) {
			c.CancelMode = pgtx.CancelModeProtocol
			c.Retry.Jitter = func() float64 { return 0.5 }
		})
		err = pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, work)
		t.Logf("%v", err)
		if sqlState(err) != pgerrcode.TooManyConnections || pgtx.Classify(err) != pgtx.ClassOverload || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("err = %v (class %v), want the 53300 and the refusal, an overload", err, pgtx.Classify(err))
		}
		var re *pgtx.RetryError
		if !errors.As(err, &re) || re.Attempts != 1+defaultMaxAdaptiveRetries {
			t.Errorf("err = %v: want a *RetryError of %d attempts", err, 1+defaultMaxAdaptiveRetries)
		}
		if want := "pgtx: the server is unreachable: gave up after 3 attempts (MaxAdaptiveRetries 2): "; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("message %q\nwant it to begin %q", err, want)
		}
	})
	t.Run("a slot frees: the retry succeeds", func(t *testing.T) {
		var connects atomic.Int64
		var once sync.Once
		tr := &attemptTracer{}
		tr.onEnd = func(d pgtx.TraceAttemptEndData) {
			if d.Retry && d.Class == pgtx.ClassOverload {
				once.Do(func() { _ = holders[0].Close(context.Background()) }) // a slot frees during the backoff
			}
		}
		pool := newOverloadPool(t, tr, &connects)
		if err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, work); err != nil {
			t.Fatalf("err = %v: the call must succeed once a slot frees", err)
		}
		if tr.attempts.Load() < 2 || tr.classes[0] != pgtx.ClassOverload {
			t.Errorf("attempts %d, classes %v: want a refused first attempt, then success", tr.attempts.Load(), tr.classes)
		}
	})
}

// TestOverloadReleasesConnectionBeforeBackoff: when fn fails with 53300, the
// connection is rolled back and back in the pool before the backoff starts.
func TestOverloadReleasesConnectionBeforeBackoff(t *testing.T) {
	ctx := testCtx(t)
	tr := &attemptTracer{}
	pool := newPool(t, newDB(t), func(c *pgtx.Config) { c.Tracer = tr; c.Retry.Jitter = func() float64 { return 0 } })
	tr.pool.Store(pool)
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, raise("53300"))
		return err
	})
	if sqlState(err) != "53300" || tr.retries.Load() != 2 {
		t.Fatalf("err = %v, retries %d", err, tr.retries.Load())
	}
	if n := tr.heldDuring.Load(); n != 0 {
		t.Errorf("%d backoffs began while a connection was still lent out", n)
	}
}

// TestRetryBudgetUnderAdmissionStorm: a server-side admission function sheds
// load with 53300 when more than 4 of its statements are active (a stand-in
// for an ingress rate limiter; a query that calls it may carry BEGIN before
// it); 32 goroutines call Transaction for 5s. With
// the budget on, the retries stay within ratio x calls + the floor; with it
// off, every call may retry twice. Both amplifications are logged.
func TestRetryBudgetUnderAdmissionStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("5s storm per variant; skipped with -short")
	}
	ctx := testCtx(t)
	dsn := newDB(t)
	setup := directConn(t, dsn)
	mustExec(t, ctx, setup, `create function admit(lim int) returns void language plpgsql as $$
		begin
			if (select count(*) from pg_stat_activity where state = 'active' and query like '%select admit(%') > lim then
				raise exception 'server busy' using errcode = '53300';
			end if;
			perform pg_sleep(0.005);
		end $$`)
	const workers, dur = 32, 5 * time.Second
	run := func(t *testing.T, budgetRatio float64) (calls, attempts, succeeded, refused int64, elapsed time.Duration) {
		tr := &attemptTracer{}
		created := time.Now()
		pool := newPool(t, dsn, func(c *pgtx.Config) {
			c.MaxConns = workers
			c.Retry.BudgetRatio = budgetRatio
			c.Tracer = tr
		})
		var nCalls, nOK, nRefused atomic.Int64
		runCtx, cancel := context.WithTimeout(ctx, dur)
		defer cancel()
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for runCtx.Err() == nil {
					err := pgtx.Transaction(runCtx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
						_, err := tx.Exec(ctx, "select admit(4)")
						return err
					})
					if errors.Is(err, context.DeadlineExceeded) && runCtx.Err() != nil {
						continue // cut short by the end of the run: not counted
					}
					nCalls.Add(1)
					switch {
					case err == nil:
						nOK.Add(1)
					case errors.Is(err, pgtx.ErrRetryBudgetExhausted):
						nRefused.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return nCalls.Load(), tr.attempts.Load(), nOK.Load(), nRefused.Load(), time.Since(created)
	}
	var onRatio float64
	t.Run("budget on", func(t *testing.T) {
		calls, attempts, ok, refused, elapsed := run(t, 0)
		onRatio = float64(attempts) / float64(calls)
		// The floor's token bucket starts with one second's worth.
		bound := (1+defaultBudgetRatio)*float64(calls) + defaultBudgetMinPerSecond*(elapsed.Seconds()+1)
		t.Logf("budget on: %d calls, %d attempts (%.3f per call), %d succeeded, %d refused by the budget; bound %.0f",
			calls, attempts, onRatio, ok, refused, bound)
		if float64(attempts) > bound {
			t.Errorf("attempts %d exceed (1 + ratio) x calls + floor x seconds = %.0f", attempts, bound)
		}
		if refused == 0 {
			t.Errorf("the budget never refused a retry: the storm did not test it")
		}
	})
	t.Run("budget off", func(t *testing.T) {
		calls, attempts, ok, _, _ := run(t, -1)
		offRatio := float64(attempts) / float64(calls)
		t.Logf("budget off: %d calls, %d attempts (%.3f per call), %d succeeded", calls, attempts, offRatio, ok)
		if offRatio <= onRatio {
			t.Errorf("attempts per call: %.3f with the budget off, %.3f with it on; off must be higher", offRatio, onRatio)
		}
	})
}
