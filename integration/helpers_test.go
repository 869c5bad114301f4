package integration

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/integration/internal/itest"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// The documented defaults of the settings some tests count on (the root
// package no longer exports them: each field's doc states its default).
const (
	defaultMaxAdaptiveRetries = 2                      // RetryConfig.MaxAdaptiveRetries
	defaultBudgetRatio        = 0.2                    // RetryConfig.BudgetRatio
	defaultBudgetMinPerSecond = 10.0                   // RetryConfig.BudgetMinPerSecond
	defaultResolveTimeout     = 5 * time.Second        // Config.ResolveTimeout
	defaultSlowHold           = 100 * time.Millisecond // storm.Config.SlowHold
	cancelPoolSize            = 2                      // the cancel pool's connections (fixed)
)

// testCtx returns a context bounded well under the test binary's timeout.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	return itest.Ctx(t)
}

// testCtxFor returns a context that ends after d or at the test's cleanup.
func testCtxFor(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	return itest.CtxFor(t, d)
}

// newDB creates a fresh database for the test and returns its DSN.
func newDB(t testing.TB) string {
	t.Helper()
	return pgtxtest.NewDatabase(t)
}

// newPool opens a pgtx pool on dsn, with mutate applied to its Config, and
// closes it at cleanup.
func newPool(t testing.TB, dsn string, mutate func(*pgtx.Config)) *pgtx.Pool {
	t.Helper()
	return itest.NewPool(t, dsn, mutate)
}

// directConn opens a plain pgx connection (no pgtx, no proxy) to check what
// the server really holds.
func directConn(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	return itest.DirectConn(t, dsn)
}

// mustExec runs one statement on db and fails the test on error.
func mustExec(t *testing.T, ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, sql string, args ...any) {
	t.Helper()
	itest.Exec(t, ctx, db, sql, args...)
}

// queryInt runs a query that returns one integer.
func queryInt(t *testing.T, ctx context.Context, conn *pgx.Conn, sql string, args ...any) int {
	t.Helper()
	return itest.QueryInt(t, ctx, conn, sql, args...)
}

// counter counts fn's runs (attempts) across goroutines.
type counter struct{ n atomic.Int64 }

func (c *counter) inc() int64 { return c.n.Add(1) }
func (c *counter) get() int64 { return c.n.Load() }

// raise returns a statement that fails with the given SQLSTATE.
func raise(code string) string {
	return "do $$ begin raise exception 'injected %', '" + code + "' using errcode = '" + code + "'; end $$"
}

// sqlState returns the SQLSTATE of the first *pgconn.PgError in err's chain,
// or "" when there is none.
func sqlState(err error) string { return itest.SQLState(err) }

// syncCommitServer starts a server of the test's own with synchronous_commit
// on (the harness turns it off for speed: a COMMIT acknowledged is then
// flushed, and waits for the synchronous standbys) and creates a database on
// it: the server and the database's DSN.
func syncCommitServer(t *testing.T) (srv *server.Server, dsn string) {
	t.Helper()
	srv = server.New(t, &server.Config{Settings: map[string]string{"synchronous_commit": "on"}})
	return srv, pgtxtest.NewDatabase(t, pgtxtest.WithServer(srv))
}

// syncCommitPair is syncCommitServer with a streaming standby of the server,
// started before the database is created.
func syncCommitPair(t *testing.T) (primary, standby *server.Server, dsn string) {
	t.Helper()
	return serverPair(t, &server.Config{Settings: map[string]string{"synchronous_commit": "on"}})
}

// serverPair starts a server of the test's own configured by cfg (nil for
// the kit's defaults) and a streaming standby of it, then creates a database
// on the primary: the two servers and the database's DSN.
func serverPair(t *testing.T, cfg *server.Config) (primary, standby *server.Server, dsn string) {
	t.Helper()
	primary = server.New(t, cfg)
	standby = server.NewStandby(t, primary)
	return primary, standby, pgtxtest.NewDatabase(t, pgtxtest.WithServer(primary))
}

// ledgerIDs returns how many times each id is in table ledger, asking on conn.
func ledgerIDs(t *testing.T, ctx context.Context, conn *pgx.Conn) map[string]int {
	t.Helper()
	present := map[string]int{}
	rows, err := conn.Query(ctx, "select id from ledger")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		present[id]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return present
}
