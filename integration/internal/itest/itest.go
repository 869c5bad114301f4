// Package itest holds the helpers the integration tests share.
package itest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Ctx returns a context bounded well under the test binary's timeout, so a
// broken promise fails the test instead of hanging it.
func Ctx(t testing.TB) context.Context {
	t.Helper()
	return CtxFor(t, time.Minute)
}

// CtxFor returns a context that ends after d or at the test's cleanup, for a
// test (or a subtest) whose work needs a bound of its own.
func CtxFor(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// DirectConn opens a plain pgx connection (no pgtx, no proxy, no pooler) to
// check what the server really holds; the test closes it at cleanup.
func DirectConn(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(Ctx(t), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// Exec runs one statement on db and fails the test on error.
func Exec(t testing.TB, ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// QueryInt runs a query that returns one integer.
func QueryInt(t testing.TB, ctx context.Context, conn *pgx.Conn, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// SQLState returns the SQLSTATE of the first *pgconn.PgError in err's chain,
// or "" when there is none.
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// Counter counts fn's runs (attempts) across goroutines.
type Counter struct{ n atomic.Int64 }

// Inc counts one run and returns the count.
func (c *Counter) Inc() int64 { return c.n.Add(1) }

// Get returns the count.
func (c *Counter) Get() int64 { return c.n.Load() }

// WaitBackendGone returns once the backend pid has exited, asking on conn.
func WaitBackendGone(t testing.TB, ctx context.Context, conn *pgx.Conn, pid int64) {
	t.Helper()
	for ctx.Err() == nil {
		var n int
		if err := conn.QueryRow(ctx, "select count(*) from pg_stat_activity where pid = $1", pid).Scan(&n); err != nil {
			t.Errorf("is backend %d gone: %v", pid, err)
			return
		}
		if n == 0 {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Errorf("backend %d did not end: %v", pid, ctx.Err())
}
