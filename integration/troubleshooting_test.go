package integration

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/bouncer"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// troubleshootingDoc is the guide whose table TestTroubleshootingTable checks.
const troubleshootingDoc = "../docs/troubleshooting.md"

// scenario produces, for real, the error of one message of the table: doc
// is that message as the table writes it ("…" stands for any text), is the
// sentinel the error matches, if any.
type scenario struct {
	doc string
	is  error
	run func(t *testing.T, ctx context.Context) error
}

// TestTroubleshootingTable: every message in the first column of
// docs/troubleshooting.md's table is produced by a scenario here, against
// a real server (faults from the kit's proxy, PgBouncer from the kit), and
// the error's text matches it; a message without a scenario, and a
// scenario whose message is not in the table, fail the test.
func TestTroubleshootingTable(t *testing.T) {
	documented := troubleshootingMessages(t)
	scenarios := troubleshootingScenarios()
	claimed := map[string]bool{}
	for _, sc := range scenarios {
		claimed[sc.doc] = true
	}
	for msg := range documented {
		if !claimed[msg] {
			t.Errorf("no scenario produces the table's message %q", msg)
		}
	}
	for _, sc := range scenarios {
		t.Run(sc.doc, func(t *testing.T) {
			t.Parallel()
			if !documented[sc.doc] {
				t.Fatalf("the scenario's message %q is not in the table of %s", sc.doc, troubleshootingDoc)
			}
			err := sc.run(t, testCtx(t))
			t.Logf("%v", err)
			switch {
			case err == nil:
				t.Fatalf("no error, want %q", sc.doc)
			case !docPattern(sc.doc).MatchString(err.Error()):
				t.Fatalf("the error says\n\t%s\nthe table says\n\t%s", err, sc.doc)
			case sc.is != nil && !errors.Is(err, sc.is):
				t.Fatalf("errors.Is(%v, %v) = false", err, sc.is)
			}
		})
	}
}

// troubleshootingMessages returns the code spans of the first column of the
// guide's table: the messages it lists.
func troubleshootingMessages(t *testing.T) map[string]bool {
	t.Helper()
	text, err := os.ReadFile(troubleshootingDoc)
	if err != nil {
		t.Fatal(err)
	}
	span := regexp.MustCompile("`([^`]+)`")
	msgs := map[string]bool{}
	for _, line := range strings.Split(string(text), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(line[1:], " | ")
		for _, m := range span.FindAllStringSubmatch(first, -1) {
			msgs[m[1]] = true
		}
	}
	if len(msgs) == 0 {
		t.Fatalf("no messages in the table of %s", troubleshootingDoc)
	}
	return msgs
}

// docPattern matches an error text that contains the message as the table
// writes it, "…" standing for any text.
func docPattern(doc string) *regexp.Regexp {
	parts := strings.Split(doc, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("(?s)" + strings.Join(parts, ".*"))
}

// insertOne is a fn that writes one row into table t, made by withTable.
func insertOne(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, "insert into t values (default)")
	return err
}

// withTable returns a fresh database with a table t to write into.
func withTable(t *testing.T, ctx context.Context) string {
	dsn := newDB(t)
	mustExec(t, ctx, directConn(t, dsn), "create table t (id serial primary key)")
	return dsn
}

// viaProxy returns dsn through a new fault proxy.
func viaProxy(t *testing.T, dsn string) (*faultproxy.Proxy, string) {
	p := faultproxy.New(t, server.Shared(t).Addr())
	pdsn, err := p.DSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return p, pdsn
}

// holdOnly starts a call that holds the pool's connection until release
// is closed; it returns once the connection is held.
func holdOnly(t *testing.T, ctx context.Context, pool *pgtx.Pool) (release func()) {
	held, done := make(chan struct{}), make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(done)
		_ = pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			close(held)
			<-stop
			return nil
		})
	}()
	<-held
	var once sync.Once
	release = func() { once.Do(func() { close(stop); <-done }) }
	t.Cleanup(release)
	return release
}

// until polls cond until it holds or ctx ends, which fails t.
func until(t *testing.T, ctx context.Context, what string, cond func() bool) {
	if !poll(ctx, cond) {
		t.Fatalf("waiting for %s: %v", what, ctx.Err())
	}
}

// poll polls cond until it holds (true) or ctx ends (false).
func poll(ctx context.Context, cond func() bool) bool {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

func troubleshootingScenarios() []scenario {
	noop := func(context.Context, pgx.Tx) error { return nil }
	return []scenario{
		{doc: "pgtx: commit outcome unknown: connection lost while COMMIT was in flight: …", is: pgtx.ErrCommitUnknown,
			run: func(t *testing.T, ctx context.Context) error {
				proxy, dsn := viaProxy(t, withTable(t, ctx))
				pool := newPool(t, dsn, func(c *pgtx.Config) { c.ResolveTimeout = -1 })
				proxy.CutOnCommitReply(1)
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, insertOne)
			}},
		{doc: "pgtx: commit outcome unknown: connection lost while COMMIT was in flight (…): …", is: pgtx.ErrCommitUnknown,
			run: func(t *testing.T, ctx context.Context) error {
				// The resolver's connections go through a proxy that
				// refuses them: nobody can be asked.
				base := withTable(t, ctx)
				proxy, dsn := viaProxy(t, base)
				refusing, cancelDSN := viaProxy(t, base)
				refusing.RefuseNew(true)
				pool := newPool(t, dsn, func(c *pgtx.Config) {
					c.CancelConnString = cancelDSN
					c.ResolveTimeout = 300 * time.Millisecond
					c.Retry.UnavailableTimeout = 300 * time.Millisecond
				})
				proxy.CutOnCommitReply(1)
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, insertOne)
			}},
		{doc: "pgtx: gave up after … attempts (MaxRetries …): …(SQLSTATE 40001)",
			run: func(t *testing.T, ctx context.Context) error {
				proxy, dsn := viaProxy(t, withTable(t, ctx))
				pool := newPool(t, dsn, nil)
				proxy.FailCommits(0, "40001")
				return pgtx.TransactionWithOptions(ctx, pool, pgtx.Serializable, pgtx.Options{MaxRetries: 1}, insertOne)
			}},
		{doc: "…(SQLSTATE 40P01)",
			run: func(t *testing.T, ctx context.Context) error {
				proxy, dsn := viaProxy(t, withTable(t, ctx))
				pool := newPool(t, dsn, nil)
				proxy.FailCommits(0, "40P01")
				return pgtx.TransactionWithOptions(ctx, pool, pgtx.Serializable, pgtx.Options{MaxRetries: 1}, insertOne)
			}},
		{doc: "pgtx: gave up after … attempts (MaxAdaptiveRetries 2): … (SQLSTATE 53300)",
			run: func(t *testing.T, ctx context.Context) error {
				// A role allowed no connection: the server refuses each
				// with 53300, too many connections.
				dsn := newDB(t)
				_, roleDSN := testRole(t, ctx, directConn(t, dsn), dsn, "full", "connection limit 0")
				pool := newPool(t, roleDSN, nil)
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, noop)
			}},
		{doc: "pgtx: the server is unreachable: gave up after … attempts in … (UnavailableTimeout …): failed to connect to …",
			run: func(t *testing.T, ctx context.Context) error {
				proxy, dsn := viaProxy(t, newDB(t))
				proxy.RefuseNew(true)
				pool := newPool(t, dsn, func(c *pgtx.Config) { c.Retry.UnavailableTimeout = 300 * time.Millisecond })
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, noop)
			}},
		{doc: "pgtx: the server is unreachable: gave up after … attempts in … (the context ended): …", is: context.DeadlineExceeded,
			run: func(t *testing.T, ctx context.Context) error {
				proxy, dsn := viaProxy(t, newDB(t))
				proxy.RefuseNew(true)
				pool := newPool(t, dsn, nil)
				ctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
				defer cancel()
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, noop)
			}},
		{doc: "… (retry budget exhausted): …", is: pgtx.ErrRetryBudgetExhausted,
			run: func(t *testing.T, ctx context.Context) error {
				// Every attempt loses its connection; a budget of almost
				// nothing refuses the retry.
				proxy, dsn := viaProxy(t, withTable(t, ctx))
				pool := newPool(t, dsn, func(c *pgtx.Config) {
					c.Retry.BudgetRatio = 0.001
					c.Retry.BudgetMinPerSecond = 0.001
				})
				proxy.CutBeforeForward(func(sql string) bool { return strings.Contains(sql, "insert into t") }, 0)
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, insertOne)
			}},
		{doc: "pgtx: timed out waiting for a pool connection (AcquireTimeout …)", is: pgtx.ErrAcquireTimeout,
			run: func(t *testing.T, ctx context.Context) error {
				pool := newPool(t, newDB(t), func(c *pgtx.Config) {
					c.MaxConns = 1
					c.AcquireTimeout = 100 * time.Millisecond
				})
				defer holdOnly(t, ctx, pool)()
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, noop)
			}},
		{doc: "pgtx: timed out waiting for a pool connection (AcquireTimeout …); a connection of the pool is held by a call with the same context: …",
			is: pgtx.ErrAcquireTimeout,
			run: func(t *testing.T, ctx context.Context) error {
				return nestedCall(t, ctx) // the request's ctx, not fn's
			}},
		{doc: "pgtx: timed out waiting for a pool connection (AcquireTimeout …); a connection of the pool is held by a call whose context is never done, as this one's (context.Background()): …",
			is: pgtx.ErrAcquireTimeout,
			run: func(t *testing.T, _ context.Context) error {
				return nestedCall(t, context.Background()) // a script's context, not fn's
			}},
		{doc: "pgtx: too many callers waiting for a pool connection", is: pgtx.ErrQueueFull,
			run: func(t *testing.T, ctx context.Context) error {
				pool := newPool(t, newDB(t), func(c *pgtx.Config) {
					c.MaxConns = 1
					c.MaxWaiters = 1
					c.AcquireTimeout = 30 * time.Second
				})
				release := holdOnly(t, ctx, pool)
				waiter := make(chan error, 1)
				go func() { waiter <- pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, noop) }()
				until(t, ctx, "a caller waiting", func() bool { return pool.Stats().Waiting >= 1 })
				err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, noop)
				release()
				if werr := <-waiter; werr != nil {
					t.Errorf("the waiting call: %v", werr)
				}
				return err
			}},
		{doc: "pgtx: circuit breaker is open", is: pgtx.ErrCircuitOpen,
			run: func(t *testing.T, ctx context.Context) error {
				pool := newPool(t, newDB(t), func(c *pgtx.Config) {
					c.Breaker = &pgtx.BreakerConfig{ConsecutiveFailures: 1, OpenFor: time.Minute}
				})
				slow := func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "select pg_sleep(5)")
					return err
				}
				if err := pgtx.TransactionWithOptions(ctx, pool, pgtx.ReadCommitted,
					pgtx.Options{StatementTimeout: 50 * time.Millisecond}, slow); sqlState(err) != "57014" {
					t.Fatalf("the failing call: %v, want 57014", err)
				}
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, noop)
			}},
		{doc: "context …: ERROR: canceling statement due to user request (SQLSTATE 57014)", is: context.Canceled,
			run: func(t *testing.T, ctx context.Context) error {
				dsn := newDB(t)
				admin := directConn(t, dsn)
				pool := newPool(t, dsn, nil)
				cctx, cancel := context.WithCancel(ctx)
				defer cancel()
				return pgtx.Transaction(cctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					go func() {
						poll(ctx, func() bool {
							n := 0
							err := admin.QueryRow(ctx, "select count(*) from pg_stat_activity where query like '%pg_sleep(30)%' and state = 'active' and pid <> pg_backend_pid()").Scan(&n)
							return err != nil || n > 0
						})
						cancel()
					}()
					_, err := tx.Exec(ctx, "select pg_sleep(30)")
					return err
				})
			}},
		{doc: "ERROR: canceling statement due to statement timeout (SQLSTATE 57014)",
			run: func(t *testing.T, ctx context.Context) error {
				pool := newPool(t, newDB(t), nil)
				return pgtx.TransactionWithOptions(ctx, pool, pgtx.ReadCommitted, pgtx.Options{StatementTimeout: 100 * time.Millisecond},
					func(ctx context.Context, tx pgx.Tx) error {
						_, err := tx.Exec(ctx, "select pg_sleep(5)")
						return err
					})
			}},
		{doc: "FATAL: terminating connection due to idle-in-transaction timeout (SQLSTATE 25P03)",
			run: func(t *testing.T, ctx context.Context) error {
				dsn := withTable(t, ctx)
				admin := directConn(t, dsn)
				pool := newPool(t, dsn, func(c *pgtx.Config) { c.IdleInTransactionTimeout = 100 * time.Millisecond })
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					var pid int
					if err := tx.QueryRow(ctx, "insert into t values (default) returning pg_backend_pid()").Scan(&pid); err != nil {
						return err
					}
					until(t, ctx, "the server to end the idle session", func() bool {
						return queryInt(t, ctx, admin, "select count(*) from pg_stat_activity where pid = $1", pid) == 0
					})
					return nil
				})
			}},
		{doc: "pgtx: invalid argument: fn called tx.Commit: …", is: pgtx.ErrInvalidArgument,
			run: func(t *testing.T, ctx context.Context) error {
				pool := newPool(t, withTable(t, ctx), nil)
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					if err := insertOne(ctx, tx); err != nil {
						return err
					}
					return tx.Commit(ctx)
				})
			}},
		{doc: "pgtx: invalid argument: fn ended the transaction itself with a statement, …", is: pgtx.ErrInvalidArgument,
			run: func(t *testing.T, ctx context.Context) error {
				pool := newPool(t, withTable(t, ctx), nil)
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					if err := insertOne(ctx, tx); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "commit")
					return err
				})
			}},
		{doc: "pgtx: invalid argument: fn returned with rows still open: …", is: pgtx.ErrInvalidArgument,
			run: func(t *testing.T, ctx context.Context) error {
				pool := newPool(t, newDB(t), nil)
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Query(ctx, "select generate_series(1, 10000)")
					return err
				})
			}},
		{doc: "pgtx: invalid argument: nested Transaction on the same pool: …", is: pgtx.ErrInvalidArgument,
			run: func(t *testing.T, ctx context.Context) error {
				pool := newPool(t, newDB(t), nil)
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, noop)
				})
			}},
		{doc: "pgtx: invalid argument: unknown isolation level 0: …", is: pgtx.ErrInvalidArgument,
			run: func(t *testing.T, ctx context.Context) error {
				return pgtx.Transaction(ctx, newPool(t, newDB(t), nil), 0, noop)
			}},
		{doc: "pgtx: invalid argument: nil pool", is: pgtx.ErrInvalidArgument,
			run: func(t *testing.T, ctx context.Context) error {
				return pgtx.Transaction(ctx, nil, pgtx.ReadCommitted, noop)
			}},
		{doc: "pgtx: invalid argument: nil fn", is: pgtx.ErrInvalidArgument,
			run: func(t *testing.T, ctx context.Context) error {
				return pgtx.Transaction(ctx, newPool(t, newDB(t), nil), pgtx.ReadCommitted, nil)
			}},
		{doc: "commit unexpectedly resulted in rollback", is: pgx.ErrTxCommitRollback,
			run: func(t *testing.T, ctx context.Context) error {
				pool := newPool(t, newDB(t), nil)
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					_, _ = tx.Exec(ctx, "select 1/0") // the error swallowed
					return nil
				})
			}},
		{doc: "pgtx: failed after … attempts (not retryable: …): …",
			run: func(t *testing.T, ctx context.Context) error {
				// A conflict, then a statement timeout on the retry.
				proxy, dsn := viaProxy(t, withTable(t, ctx))
				pool := newPool(t, dsn, nil)
				proxy.FailCommits(1, "40001")
				runs := 0
				return pgtx.TransactionWithOptions(ctx, pool, pgtx.Serializable, pgtx.Options{StatementTimeout: 100 * time.Millisecond},
					func(ctx context.Context, tx pgx.Tx) error {
						if runs++; runs > 1 {
							_, err := tx.Exec(ctx, "select pg_sleep(5)")
							return err
						}
						return insertOne(ctx, tx)
					})
			}},
		{doc: "FATAL: unsupported startup parameter: …",
			run: func(t *testing.T, ctx context.Context) error {
				dsn := newDB(t)
				pgb := bouncer.New(t, server.Shared(t), &bouncer.Config{})
				pool := newPool(t, pgb.DSN(dbName(t, dsn)), nil)
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, noop)
			}},
		{doc: `prepared statement "stmtcache_…" already exists`,
			run: func(t *testing.T, ctx context.Context) error {
				// Two clients of one server connection, each preparing
				// the same statement under pgx's name for it.
				dsn := newDB(t)
				pgb := bouncer.New(t, server.Shared(t), &bouncer.Config{DefaultPoolSize: 1})
				noTimeouts := func(c *pgtx.Config) {
					c.StatementTimeout, c.IdleInTransactionTimeout = -1, -1
				}
				var err error
				for range 2 {
					pool := newPool(t, pgb.DSN(dbName(t, dsn)), noTimeouts)
					if err = pool.QueryRow(ctx, "select $1::int", 1).Scan(new(int)); err != nil {
						break
					}
				}
				return err
			}},
		{doc: "simple protocol queries must be run with client_encoding=UTF8",
			run: func(t *testing.T, ctx context.Context) error {
				dsn := newDB(t)
				sep := "?"
				if strings.Contains(dsn, "?") {
					sep = "&"
				}
				pool := newPool(t, dsn+sep+"client_encoding=LATIN1", nil)
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "select $1::text", "x")
					return err
				})
			}},
		{doc: "pgtx: capture the server's identity: …",
			run: func(t *testing.T, ctx context.Context) error {
				proxy, dsn := viaProxy(t, newDB(t))
				pool := newPool(t, dsn, func(c *pgtx.Config) { c.Retry.MaxRetries = -1 })
				proxy.CutBeforeForward(func(sql string) bool { return strings.Contains(sql, "pg_control_system()") }, 1)
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, noop)
			}},
		{doc: "pgtx: ask what is in front of the server: …",
			run: func(t *testing.T, ctx context.Context) error {
				// Another pid answers through PgBouncer: the pool asks
				// whether Pgpool-II is in front, and the connection breaks.
				dsn := newDB(t)
				pgb := bouncer.New(t, server.Shared(t), &bouncer.Config{})
				proxy, through := proxyTo(t, pgb.Addr(), pgb.DSN(dbName(t, dsn)))
				proxy.CutBeforeForward(func(sql string) bool { return sql == "show pool_version" }, 1)
				pool := newPool(t, through, func(c *pgtx.Config) {
					bouncerSettings(c)
					c.Retry.MaxRetries = -1
				})
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, noop)
			}},
		{doc: "pgtx: identify the connection's backends: …",
			run: func(t *testing.T, ctx context.Context) error {
				proxy, dsn := viaProxy(t, newDB(t))
				proxy.CutBeforeForward(func(sql string) bool { return strings.Contains(sql, "pg_stat_get_activity(pg_backend_pid())") }, 1)
				pool := newPool(t, dsn, func(c *pgtx.Config) { c.Retry.MaxRetries = -1 })
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, noop)
			}},
	}
}

// nestedCall runs a Transaction inside the fn of another on a pool of one
// connection, both given ctx rather than fn's context, and returns the
// inner call's error.
func nestedCall(t *testing.T, ctx context.Context) error {
	t.Helper()
	pool := newPool(t, newDB(t), func(c *pgtx.Config) {
		c.MaxConns = 1
		c.AcquireTimeout = 100 * time.Millisecond
	})
	var inner error
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(fnCtx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(fnCtx, "select 1"); err != nil {
			return err
		}
		inner = pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
		return nil
	})
	if err != nil {
		t.Fatalf("the outer call: %v", err)
	}
	return inner
}
