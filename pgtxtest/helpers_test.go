package pgtxtest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// queryString runs a query that returns one text value.
func queryString(t *testing.T, conn *pgx.Conn, sql string, args ...any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var v string
	if err := conn.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// fakeTB records failures and skips; Fatal, FailNow and Skip end the calling
// goroutine, as testing's do. Cleanup functions run when runFakeTB's function
// returns.
type fakeTB struct {
	testing.TB // nil: calling anything else panics, which the test would see
	mu         sync.Mutex
	failed     bool
	skipped    bool
	msgs       []string
	cleanups   []func()
}

func (f *fakeTB) Helper()      {}
func (f *fakeTB) Name() string { return "TestFake" }

func (f *fakeTB) Logf(format string, args ...any) {}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = true
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func (f *fakeTB) FailNow() {
	f.mu.Lock()
	f.failed = true
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) {
	f.mu.Lock()
	f.msgs = append(f.msgs, fmt.Sprint(args...))
	f.mu.Unlock()
	f.FailNow()
}

func (f *fakeTB) Fatalf(format string, args ...any) { f.Fatal(fmt.Sprintf(format, args...)) }

func (f *fakeTB) Skip(args ...any) {
	f.mu.Lock()
	f.skipped = true
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

// messages returns what was reported, one message a line.
func (f *fakeTB) messages() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.msgs, "\n")
}

// runFakeTB runs fn with a fakeTB in a goroutine of its own and waits for it,
// then runs its cleanups, last registered first.
func runFakeTB(fn func(testing.TB)) *fakeTB {
	tb := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(tb)
	}()
	<-done
	tb.mu.Lock()
	cleanups := tb.cleanups
	tb.cleanups = nil
	tb.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	return tb
}

// testContext returns a context that bounds a test's database work.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// connConfig parses dsn for a plain-text connection without fallbacks, so
// that every pgx.Connect is exactly one connection through a proxy or a
// bouncer.
func connConfig(t *testing.T, dsn string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	cfg.TLSConfig = nil
	cfg.Fallbacks = nil
	cfg.ConnectTimeout = 15 * time.Second
	return cfg
}

// testConnect opens a connection that is closed when the test ends.
func testConnect(t *testing.T, ctx context.Context, cfg *pgx.ConnConfig) *pgx.Conn {
	t.Helper()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect to %s:%d: %v", cfg.Host, cfg.Port, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// testExec runs sql and fails the test on error.
func testExec(t *testing.T, ctx context.Context, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// testTimeout bounds every database operation of a test.
const testTimeout = 60 * time.Second
