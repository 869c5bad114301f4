package formation

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
)

// oneShot runs fn on a fresh connection to dsn, so that a server that went away
// costs one try, not the rest of the test.
func oneShot(ctx context.Context, dsn string, fn func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return fn(ctx, conn)
}

// timeline returns the server's current timeline, the first 8 hex digits of the name
// of the WAL file it writes.
func timeline(t *testing.T, conn *pgx.Conn) uint64 {
	t.Helper()
	name := queryString(t, conn, "SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)")
	tli, err := strconv.ParseUint(name, 16, 32)
	if err != nil {
		t.Fatalf("timeline %q: %v", name, err)
	}
	return tli
}

// waitRow waits until the row of items with id is visible on the server at dsn.
func waitRow(t *testing.T, ctx context.Context, dsn string, id int) {
	t.Helper()
	kittest.Eventually(t, ctx, 30*time.Second, "row "+strconv.Itoa(id)+" replicated", func(ctx context.Context) error {
		return oneShot(ctx, dsn, func(ctx context.Context, conn *pgx.Conn) error {
			var n int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM items WHERE id = $1", id).Scan(&n); err != nil {
				return err
			}
			if n != 1 {
				return errors.New("not there yet")
			}
			return nil
		})
	})
}

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

// fakeEnv is a getenv over a map.
func fakeEnv(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
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

// inRecovery asks the server at dsn whether it is in recovery, that is a standby.
func inRecovery(ctx context.Context, dsn string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return false, err
	}
	res := conn.ExecParams(ctx, "SELECT pg_is_in_recovery()::text", nil, nil, nil, nil).Read()
	if err := errors.Join(res.Err, conn.Close(ctx)); err != nil {
		return false, err
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
		return false, fmt.Errorf("pg_is_in_recovery(): %d rows", len(res.Rows))
	}
	return string(res.Rows[0][0]) == "true", nil
}
