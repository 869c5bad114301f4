package behindpgpool

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/integration/internal/itest"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
)

// TestPgpoolCancelKeepsTheConnection: behind Pgpool-II, in the default
// CancelMode, on a session balanced to the standby and on one balanced to
// the primary, a transaction that holds a row lock and sleeps is cancelled
// when its deadline passes: the lock is released within a few
// milliseconds (a direct session waiting for it gets it), the call's error
// is the deadline's, the connection is kept (no reconnect, none closed),
// and the next call on it runs. A plain Pool.Exec is cancelled alike, and
// a read-only transaction's read that Pgpool-II balances (on the standby's
// backend for the session balanced to it: it is cancelled on the standby,
// past Pgpool-II, which forwards a cancel to each node a second apart).
// The pool found Pgpool-II, and said so once.
func TestPgpoolCancelKeepsTheConnection(t *testing.T) {
	e := behindPgpool(t, nil, hotAccounts...)
	ctx := itest.Ctx(t)
	tr := &poolerTracer{}
	waiter := itest.DirectConn(t, e.direct)
	for _, node := range []struct{ name, addr string }{{"standby", e.standby.Addr()}, {"primary", e.primary.Addr()}} {
		t.Run(node.name, func(t *testing.T) {
			pool := e.balancedTo(t, node.addr, func(c *pgtx.Config) { c.Tracer = tr })
			if err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "update acct set version = version + 1 where id = $1", 1)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			conns := pool.Pgxpool().Stat().NewConnsCount()
			for i := range 3 {
				const deadline = 300 * time.Millisecond
				held := make(chan struct{})
				released := make(chan time.Time, 1)
				go func() {
					select {
					case <-held:
						_, _ = waiter.Exec(ctx, "update acct set version = version + 1 where id = 1")
						released <- time.Now()
					case <-ctx.Done():
						released <- time.Time{}
					}
				}()
				cctx, cancel := context.WithTimeout(ctx, deadline)
				end, _ := cctx.Deadline()
				err := pgtx.Transaction(cctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "update acct set version = version + 1 where id = $1", 1); err != nil {
						return err
					}
					close(held)
					_, err := tx.Exec(ctx, "select pg_sleep(10)")
					return err
				})
				returned := time.Now()
				cancel()
				select {
				case <-held:
				default:
					t.Fatalf("call %d: err = %v before it took the lock", i, err)
				}
				lockFreed := <-released
				t.Logf("call %d: lock released %v after the deadline, the call returned %v after it",
					i, lockFreed.Sub(end).Round(100*time.Microsecond), returned.Sub(end).Round(100*time.Microsecond))
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err = %v, want the deadline's", err)
				}
				if late := lockFreed.Sub(end); late > 500*time.Millisecond {
					t.Errorf("the lock was released %v after the deadline: the statement was not cancelled on the server", late)
				}
				if late := returned.Sub(end); late > 500*time.Millisecond {
					t.Errorf("the call returned %v after the deadline", late)
				}
			}
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			start := time.Now()
			_, err := pool.Exec(cctx, "select pg_sleep(10)")
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
				t.Errorf("Pool.Exec: err = %v after %v, want the deadline's, promptly", err, time.Since(start))
			}
			// A read Pgpool-II balances: on the standby's backend for a
			// session balanced to it.
			cctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
			start = time.Now()
			err = pgtx.TransactionWithOptions(cctx, pool, pgtx.RepeatableRead, pgtx.Options{ReadOnly: true},
				func(ctx context.Context, tx pgx.Tx) error {
					var n int64
					return tx.QueryRow(ctx, "select count(*) from (select generate_series(1, 10000000000)) s").Scan(&n)
				})
			cancel()
			t.Logf("a balanced read returned %v after its 300ms deadline", (time.Since(start) - 300*time.Millisecond).Round(100*time.Microsecond))
			if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
				tr.mu.Lock()
				t.Errorf("a balanced read: err = %v after %v, want the deadline's, promptly (cancels %+v)", err, time.Since(start), tr.cancels)
				tr.mu.Unlock()
			}
			var one int
			if err := pool.QueryRow(ctx, "select 1").Scan(&one); err != nil {
				t.Errorf("the next statement: %v", err)
			}
			s := pool.Stats().Cancels
			if n := pool.Pgxpool().Stat().NewConnsCount(); n != conns || s.ClosedCount != 0 || s.SignalledCount+s.ProtocolCount != 5 {
				t.Errorf("%d new connections, %d closed by a cancel, %d signalled, %d protocol; want 0, 0 and 5 in all (cancels %+v)",
					n-conns, s.ClosedCount, s.SignalledCount, s.ProtocolCount, s)
			}
		})
	}
	found := tr.poolers()
	if len(found) == 0 || found[0].Name != "Pgpool-II" || found[0].Version == "" {
		t.Errorf("the pools found %+v, want Pgpool-II with its version", found)
	}
}

// TestPgpoolRidesOutRestarts: behind Pgpool-II, 4 workers run transfers
// with 10s deadlines while the primary restarts, then while the standby
// takes over from it (the primary stopped, the standby promoted, Pgpool-II
// told): no call fails, and no money is made or lost. With Pgpool-II's own
// defaults, which detach the primary for good when it shuts down, the pool
// names the two settings that must be off.
func TestPgpoolRidesOutRestarts(t *testing.T) {
	t.Run("defaults named", func(t *testing.T) {
		e := behindPgpool(t, nil)
		tr := &poolerTracer{}
		pool := itest.NewPool(t, e.through, func(c *pgtx.Config) { c.Tracer = tr })
		if err := pool.Ping(itest.Ctx(t)); err != nil {
			t.Fatal(err)
		}
		found := tr.poolers()
		var settings []string
		if len(found) == 1 {
			for _, a := range found[0].Advice {
				settings = append(settings, a.Setting+"="+a.Want)
			}
		}
		if want := []string{"failover_on_backend_error=off", "failover_on_backend_shutdown=off"}; len(found) != 1 || !slices.Equal(settings, want) {
			t.Errorf("the pool said %+v, want once Pgpool-II with advice %q", found, want)
		}
	})
	t.Run("restart and switchover", func(t *testing.T) {
		e := behindPgpool(t, map[string]string{"failover_on_backend_error": "off", "failover_on_backend_shutdown": "off"}, hotAccounts...)
		ctx := itest.CtxFor(t, 3*time.Minute)
		pool := itest.NewPool(t, e.through, func(c *pgtx.Config) { c.MaxConns = 4 })
		var stale, calls, failed atomic.Int64
		var mu sync.Mutex
		var errs []error
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					err := pgtx.Transaction(cctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
						return transferChecked(ctx, tx, 1+(w+i)%4, 1+(w+i+1)%4, &stale)
					})
					cancel()
					calls.Add(1)
					if err != nil {
						failed.Add(1)
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
		steady := func() {
			n := calls.Load()
			for calls.Load() < n+20 && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
		steady()
		start := time.Now()
		if err := e.primary.Restart(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
		t.Logf("the primary restarted in %v (1s down)", time.Since(start).Round(time.Millisecond))
		steady()
		start = time.Now()
		if err := e.primary.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := e.standby.Promote(ctx); err != nil {
			t.Fatal(err)
		}
		if err := e.pool.PromoteNode(ctx, 1); err != nil {
			t.Fatal(err)
		}
		t.Logf("the standby took over in %v", time.Since(start).Round(time.Millisecond))
		steady()
		close(stop)
		wg.Wait()
		t.Logf("%d calls, %d failed", calls.Load(), failed.Load())
		if n := failed.Load(); n != 0 {
			t.Errorf("%d calls failed: %v", n, errors.Join(errs...))
		}
		admin := itest.DirectConn(t, e.onStandby)
		if sum := itest.QueryInt(t, ctx, admin, "select sum(balance)::int from acct"); sum != 4000 {
			t.Errorf("the accounts hold %d, want 4000", sum)
		}
	})
}

// TestPgpoolLostCommitKeepsNodesAttached: behind Pgpool-II with its own
// defaults (which detach a node whose backend a client ends), a partition
// at COMMIT (the proxy in front of Pgpool-II holds it back) leaves the
// backend idle in its transaction; resolution ends it and runs the
// transaction again: the call returns nil, the row is there once, and both
// nodes are still attached, the primary still the primary.
func TestPgpoolLostCommitKeepsNodesAttached(t *testing.T) {
	e := behindPgpool(t, nil, "create table ledger (id text primary key)")
	ctx := itest.Ctx(t)
	proxy := faultproxy.New(t, e.pool.Addr())
	through, err := proxy.DSN(e.through)
	if err != nil {
		t.Fatal(err)
	}
	pool := itest.NewPool(t, through, func(c *pgtx.Config) { c.CommitTimeout = 300 * time.Millisecond })
	t.Cleanup(func() { proxy.ReleaseStalled() })
	for i := range 3 {
		proxy.StallOnCommit(1)
		var runs itest.Counter
		id := string(rune('a' + i))
		err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			runs.Inc()
			_, err := tx.Exec(ctx, "insert into ledger values ($1)", id)
			return err
		})
		if err != nil {
			t.Fatalf("call %d: err = %v: a transaction whose backend was ended must resolve and run again", i, err)
		}
		admin := itest.DirectConn(t, e.direct)
		if n := itest.QueryInt(t, ctx, admin, "select count(*) from ledger where id = $1", id); n != 1 || runs.Get() != 2 {
			t.Errorf("call %d: %d rows, fn ran %d times; want 1 row, 2 runs", i, n, runs.Get())
		}
		nodes, err := e.pool.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if n.Status != "up" || (n.ID == 0) != (n.Role == "primary") {
				t.Fatalf("call %d: node %d is %s, %s: Pgpool-II detached a node", i, n.ID, n.Status, n.Role)
			}
		}
	}
	if s := pool.Stats().Resolved; s.TerminatedCount != 3 {
		t.Errorf("resolutions %+v, want 3 backends ended", s)
	}
}
