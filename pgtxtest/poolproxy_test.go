package pgtxtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// The pool options that put a fault proxy in front of NewPool's pool.

// itemsMigrations is the schema of the fault tests: a table of items and a
// counter.
var itemsMigrations = mapFS(map[string]string{
	"0001_items.sql": `CREATE TABLE items (id int PRIMARY KEY, note text);
		CREATE TABLE counter (n int NOT NULL); INSERT INTO counter VALUES (0);`,
})

// attemptTracer records the end of every attempt of pgtx transactions.
type attemptTracer struct {
	mu   sync.Mutex
	ends []pgtx.TraceAttemptEndData
}

func (a *attemptTracer) TraceTransactionStart(ctx context.Context, _ pgtx.TraceTransactionStartData) context.Context {
	return ctx
}
func (a *attemptTracer) TraceTransactionEnd(context.Context, pgtx.TraceTransactionEndData) {}
func (a *attemptTracer) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	return ctx
}
func (a *attemptTracer) TraceAttemptEnd(_ context.Context, d pgtx.TraceAttemptEndData) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ends = append(a.ends, d)
}

// A COMMIT that FailCommits fails makes pgtx run the transaction again: the
// function runs twice and the database shows one effect.
func TestProxyFailCommitsPgtx(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"40001", "40P01"} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			p := faultproxy.New(t, server.Shared(t).Addr())
			tracer := &attemptTracer{}
			pool := NewPool(t, WithMigrations(itemsMigrations), WithProxy(p),
				WithConfig(func(c *pgtx.Config) { c.Tracer = tracer; c.MaxConns = 2 }))
			ctx := testContext(t)
			directDSN, err := server.DSNWithAddr(pool.Config().ConnString(), server.Shared(t).Addr())
			if err != nil {
				t.Fatal(err)
			}
			direct := kittest.ConnectConfig(t, ctx, kittest.ConnConfig(t, directDSN))
			rollbacks, err := kittest.XactRollbacks(ctx, direct)
			if err != nil {
				t.Fatal(err)
			}
			p.FailCommits(1, code)
			var runs atomic.Int64
			err = pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
				runs.Add(1)
				_, err := tx.Exec(ctx, "UPDATE counter SET n = n + 1")
				return err
			})
			if err != nil {
				t.Fatalf("Transaction: %v", err)
			}
			if n := runs.Load(); n != 2 {
				t.Errorf("fn ran %d times, want 2", n)
			}
			if got := kittest.QueryString(t, direct, "SELECT n::text FROM counter"); got != "1" {
				t.Errorf("counter = %s, want 1", got)
			}
			tracer.mu.Lock()
			ends := tracer.ends
			tracer.mu.Unlock()
			if len(ends) != 2 || !ends[0].Retry || ends[0].Class != pgtx.ClassConflict || ends[1].Err != nil {
				t.Fatalf("attempts %+v: want a retried conflict, then a commit", ends)
			}
			kittest.RequireSQLState(t, "the first attempt", ends[0].Err, code)
			if s := p.Stats(); s.InjectedFailures != 1 {
				t.Errorf("InjectedFailures = %d, want 1", s.InjectedFailures)
			}
			pool.Close() // its backends report their counts as they exit
			kittest.WaitRollbacksAbove(t, ctx, direct, rollbacks)
		})
	}
}

// With WithFailEveryCommitOnce, every transaction function runs exactly twice, also
// when many run at once, and identical transactions that follow one another each
// fail once.
func TestWithFailEveryCommitOnce(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"40001", "40P01"} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			p := faultproxy.New(t, server.Shared(t).Addr())
			pool := NewPool(t, WithMigrations(itemsMigrations), WithFailEveryCommitOnce(code), WithProxy(p))
			ctx := testContext(t)

			const workers, perWorker = 8, 5
			var runs [workers][perWorker]atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, workers*perWorker)
			for w := range workers {
				wg.Go(func() {
					for i := range perWorker {
						errs <- pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
							runs[w][i].Add(1)
							// The same statements at every attempt: an argument that
							// changed (pgtx.Attempt(ctx), say) would make each
							// attempt a new transaction to the proxy.
							_, err := tx.Exec(ctx, "INSERT INTO items VALUES ($1, $2)", w*100+i, fmt.Sprint("worker ", w))
							return err
						})
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("Transaction: %v", err)
				}
			}
			for w := range workers {
				for i := range perWorker {
					if n := runs[w][i].Load(); n != 2 {
						t.Errorf("transaction %d.%d: fn ran %d times, want 2", w, i, n)
					}
				}
			}
			var rows int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM items").Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if rows != workers*perWorker {
				t.Errorf("%d rows, want %d", rows, workers*perWorker)
			}
			if s := p.Stats(); s.InjectedFailures != workers*perWorker {
				t.Errorf("InjectedFailures = %d, want %d", s.InjectedFailures, workers*perWorker)
			}

			// The same transaction three times in a row: each fails once.
			var same atomic.Int64
			for range 3 {
				err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					same.Add(1)
					_, err := tx.Exec(ctx, "UPDATE counter SET n = n + 1")
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			var n int
			if err := pool.QueryRow(ctx, "SELECT n FROM counter").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 3 || same.Load() != 6 {
				t.Errorf("three identical transactions: counter %d, fn ran %d times; want 3 and 6", n, same.Load())
			}

			// Off: a transaction runs once.
			p.StopFailing()
			var once atomic.Int64
			if err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				once.Add(1)
				_, err := tx.Exec(ctx, "UPDATE counter SET n = n + 1")
				return err
			}); err != nil || once.Load() != 1 {
				t.Errorf("after StopFailing: %v, fn ran %d times", err, once.Load())
			}
		})
	}
}

// WithProxy refuses a nil proxy, two different proxies, and a proxy to another
// address than the database's server, failing the test with a message that
// says so; the same proxy given twice is one proxy.
func TestWithProxyOptionErrors(t *testing.T) {
	t.Parallel()
	p := faultproxy.New(t, "127.0.0.1:1") // never dialled
	other := faultproxy.New(t, "127.0.0.1:2")
	for name, tc := range map[string]struct {
		opts []PoolOption
		want string
	}{
		"nil":         {[]PoolOption{WithProxy(nil)}, "WithProxy needs a proxy, got a nil *faultproxy.Proxy"},
		"two proxies": {[]PoolOption{WithProxy(p), WithProxy(other)}, "WithProxy given two proxies (to 127.0.0.1:1 and to 127.0.0.1:2)"},
	} {
		t.Run(name, func(t *testing.T) {
			tb := kittest.RunFakeTB(func(tb testing.TB) { NewPool(tb, tc.opts...) })
			if !tb.Failed() || !strings.Contains(tb.Messages(), tc.want) {
				t.Errorf("failed %t, %q; want a failure saying %q", tb.Failed(), tb.Messages(), tc.want)
			}
		})
	}
	t.Run("the same proxy twice", func(t *testing.T) {
		var o *options
		tb := kittest.RunFakeTB(func(tb testing.TB) { o = collectOptions(tb, "NewPool", []PoolOption{WithProxy(p), WithProxy(p)}) })
		if tb.Failed() || o.proxy != p {
			t.Errorf("failed %t (%q), proxy %p; want no failure and proxy %p", tb.Failed(), tb.Messages(), o.proxy, p)
		}
	})
	t.Run("another server", func(t *testing.T) {
		srv := server.Shared(t)
		if srv.Addr() == "" {
			t.Skip("the shared server is reached over a Unix socket")
		}
		tb := kittest.RunFakeTB(func(tb testing.TB) { NewPool(tb, WithProxy(p)) })
		want := "WithProxy: the proxy forwards to 127.0.0.1:1, but the database is on " + srv.Addr()
		if !tb.Failed() || !strings.Contains(tb.Messages(), want) {
			t.Errorf("failed %t, %q; want a failure saying %q", tb.Failed(), tb.Messages(), want)
		}
		if s := p.Stats(); s.Accepted != 0 {
			t.Errorf("the proxy accepted %d connections, want none", s.Accepted)
		}
	})
}

// WithFailEveryCommitOnce refuses codes other than 40001 and 40P01.
func TestWithFailEveryCommitOnceRefused(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"", "23505", "40002", "57P01", "40001'; DROP TABLE x; --"} {
		tb := kittest.RunFakeTB(func(tb testing.TB) { NewPool(tb, WithFailEveryCommitOnce(code)) })
		if !tb.Failed() || !strings.Contains(tb.Messages(), "WithFailEveryCommitOnce: SQLSTATE") {
			t.Errorf("NewPool with WithFailEveryCommitOnce(%q): failed %t, %q", code, tb.Failed(), tb.Messages())
		}
	}
}
