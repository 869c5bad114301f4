package integration

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// TestFnMisuseIsInvalidArgument: fn ending the transaction itself or
// leaving rows open is a clear error matching ErrInvalidArgument, never
// ErrCommitUnknown (which means only "COMMIT was sent and its answer was
// lost"), and pgtx commits nothing by surprise.
func TestFnMisuseIsInvalidArgument(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table m (id text primary key)")
	pool := newPool(t, dsn, func(c *pgtx.Config) { c.MaxConns = 1 })
	tests := []struct {
		name       string
		fn         func(ctx context.Context, tx pgx.Tx) error
		wantStored int // rows left by fn's own statements
	}{
		{"fn calls tx.Commit", func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }, 0},
		{"fn calls tx.Rollback", func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) }, 0},
		{"fn executes COMMIT", func(ctx context.Context, tx pgx.Tx) error { _, err := tx.Exec(ctx, "commit"); return err }, 1},
		{"fn leaves rows open", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Query(ctx, "select g from generate_series(1, 10000) g")
			return err
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustExec(t, ctx, admin, "truncate m")
			attempts := 0
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				attempts++
				if _, err := tx.Exec(ctx, "insert into m values ('x')"); err != nil {
					return err
				}
				return tt.fn(ctx, tx)
			})
			if !errors.Is(err, pgtx.ErrInvalidArgument) || errors.Is(err, pgtx.ErrCommitUnknown) {
				t.Fatalf("err = %v, want ErrInvalidArgument and not ErrCommitUnknown", err)
			}
			t.Logf("%s: %v", tt.name, err)
			if attempts != 1 {
				t.Errorf("fn ran %d times, want once", attempts)
			}
			if n := queryInt(t, ctx, admin, "select count(*) from m"); n != tt.wantStored {
				t.Errorf("rows = %d, want %d", n, tt.wantStored)
			}
			if _, err := pool.Exec(ctx, "select 1"); err != nil {
				t.Errorf("the pool must serve after the misuse: %v", err)
			}
		})
	}
}

// TestFnEndingTheTransactionInSQL: what happens when fn ends the
// transaction with a statement of its own, as Transaction's doc says. The
// server does as told: COMMIT (or END) commits fn's statements before it,
// unless the transaction had failed (then it rolls back), ROLLBACK discards
// them, and statements after it commit one by one. Transaction sees the
// connection outside a transaction when fn returns, whether fn returned nil
// or an error: it commits and rolls back nothing more, runs fn no more
// (before, a conflict fn returned after its COMMIT ran fn eleven times,
// committing its row each time), and returns an error matching
// ErrInvalidArgument that keeps fn's error and never claims that nothing
// was committed. BEGIN inside the transaction is a no-op the server warns
// about; COMMIT AND CHAIN and ROLLBACK AND CHAIN leave a transaction open,
// which Transaction cannot tell from its own: it commits it.
func TestFnEndingTheTransactionInSQL(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table m (id text)") // no key: a second run of fn adds rows
	errOwn := errors.New("fn's own error")
	exec := func(sql string) func(ctx context.Context, tx pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error { _, err := tx.Exec(ctx, sql); return err }
	}
	then := func(fns ...func(ctx context.Context, tx pgx.Tx) error) func(ctx context.Context, tx pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			var err error
			for _, fn := range fns {
				err = fn(ctx, tx)
			}
			return err
		}
	}
	tests := []struct {
		name      string
		fn        func(ctx context.Context, tx pgx.Tx) error // after fn inserted 'x'
		wantRows  string                                     // what the table holds after the call
		wantValid bool                                       // the call returns nil
		wantFnErr error                                      // fn's error, which the call's must keep
		wantCode  string                                     // a SQLSTATE the call's error must keep
	}{
		{name: "COMMIT", fn: exec("commit"), wantRows: "x"},
		{name: "END", fn: exec("end"), wantRows: "x"},
		{name: "COMMIT of a failed transaction", fn: then(exec("select 1/0"), exec("commit")), wantRows: ""},
		{name: "ROLLBACK", fn: exec("rollback"), wantRows: ""},
		{name: "ABORT", fn: exec("abort"), wantRows: ""},
		{name: "COMMIT, then a statement", fn: then(exec("commit"), exec("insert into m values ('y')")), wantRows: "x,y"},
		{name: "COMMIT, then fn's own error", fn: then(exec("commit"), func(context.Context, pgx.Tx) error { return errOwn }),
			wantRows: "x", wantFnErr: errOwn},
		{name: "COMMIT, then a conflict fn returns", fn: then(exec("commit"), exec(raise("40001"))), wantRows: "x", wantCode: "40001"},
		{name: "COMMIT, then tx.Commit", fn: then(exec("commit"), func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }), wantRows: "x"},
		{name: "ROLLBACK, then fn's own error", fn: then(exec("rollback"), func(context.Context, pgx.Tx) error { return errOwn }),
			wantRows: "", wantFnErr: errOwn},
		{name: "BEGIN: a no-op", fn: exec("begin"), wantRows: "x", wantValid: true},
		{name: "COMMIT AND CHAIN: not seen", fn: then(exec("commit and chain"), exec("insert into m values ('y')")), wantRows: "x,y", wantValid: true},
		{name: "ROLLBACK AND CHAIN: not seen", fn: then(exec("rollback and chain"), exec("insert into m values ('y')")), wantRows: "y", wantValid: true},
	}
	for _, resolve := range []bool{false, true} {
		pool := newPool(t, dsn, func(c *pgtx.Config) {
			c.MaxConns = 1
			if !resolve {
				c.ResolveTimeout = -1
			}
		})
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/resolve %v", tt.name, resolve), func(t *testing.T) {
				mustExec(t, ctx, admin, "truncate m")
				attempts := 0
				err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					attempts++
					if _, err := tx.Exec(ctx, "insert into m values ('x')"); err != nil {
						return err
					}
					return tt.fn(ctx, tx)
				})
				t.Logf("%v", err)
				var rows string
				if err := admin.QueryRow(ctx, "select coalesce(string_agg(id, ',' order by id), '') from m").Scan(&rows); err != nil {
					t.Fatal(err)
				}
				if rows != tt.wantRows || attempts != 1 {
					t.Errorf("rows %q after %d runs of fn, want %q after one", rows, attempts, tt.wantRows)
				}
				if tt.wantValid {
					if err != nil {
						t.Errorf("err = %v, want nil", err)
					}
				} else {
					if !errors.Is(err, pgtx.ErrInvalidArgument) || errors.Is(err, pgtx.ErrCommitUnknown) || pgtx.Classify(err) != pgtx.ClassPermanent {
						t.Errorf("err = %v (class %v), want ErrInvalidArgument, permanent, and not ErrCommitUnknown", err, pgtx.Classify(err))
					}
					if msg := fmt.Sprint(err); strings.Contains(msg, "Nothing was committed") || !strings.Contains(msg, "COMMIT") {
						t.Errorf("err = %v: want it to say what a COMMIT statement did, and never that nothing was committed", err)
					}
				}
				if tt.wantFnErr != nil && !errors.Is(err, tt.wantFnErr) {
					t.Errorf("err = %v: fn's error must stay reachable", err)
				}
				if tt.wantCode != "" && sqlState(err) != tt.wantCode {
					t.Errorf("err = %v: want its SQLSTATE %s reachable", err, tt.wantCode)
				}
				if _, err := pool.Exec(ctx, "select 1"); err != nil {
					t.Errorf("the pool must serve after the call: %v", err)
				}
			})
		}
	}
}

// TestIdleSessionTimeoutAtCommitIsTimeout: the server ends the session for
// idle_in_transaction_session_timeout while fn idles; COMMIT then reads FATAL
// 25P03. The session died before COMMIT: definitively not committed, a
// timeout, not an unknown outcome, with and without commit resolution.
func TestIdleSessionTimeoutAtCommitIsTimeout(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table m (id text primary key)")
	for _, resolve := range []bool{false, true} {
		name := map[bool]string{false: "resolve off", true: "resolve on"}[resolve]
		t.Run(name, func(t *testing.T) {
			pool := newPool(t, dsn, func(c *pgtx.Config) {
				c.IdleInTransactionTimeout = 200 * time.Millisecond
				if !resolve {
					c.ResolveTimeout = -1
				}
			})
			attempts := 0
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				attempts++
				if _, err := tx.Exec(ctx, "insert into m values ('x')"); err != nil {
					return err
				}
				<-time.After(600 * time.Millisecond) // the server's idle timeout fires meanwhile
				return nil
			})
			if errors.Is(err, pgtx.ErrCommitUnknown) || pgtx.Classify(err) != pgtx.ClassTimeout || sqlState(err) != "25P03" {
				t.Fatalf("err = %v (class %v), want the 25P03 timeout, not ErrCommitUnknown", err, pgtx.Classify(err))
			}
			if attempts != 1 {
				t.Errorf("fn ran %d times, want once: timeouts are not retried", attempts)
			}
			if n := queryInt(t, ctx, admin, "select count(*) from m"); n != 0 {
				t.Errorf("rows = %d, want 0", n)
			}
		})
	}
}

// TestMaxWaitersIsHard: 32 callers arrive at once at a pool whose only
// connection is held; with MaxWaiters 2 exactly 2 wait and 30 are refused
// with ErrQueueFull.
func TestMaxWaitersIsHard(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, newDB(t), func(c *pgtx.Config) {
		c.MaxConns = 1
		c.MaxWaiters = 2
		c.AcquireTimeout = 20 * time.Second
	})
	held, release := make(chan struct{}), make(chan struct{})
	holderDone := make(chan error, 1)
	go func() {
		holderDone <- pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	const callers = 32
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused, served := 0, 0
	var others []error
	for range callers {
		wg.Go(func() {
			<-start
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, pgtx.ErrQueueFull):
				refused++
			case err == nil:
				served++
			default:
				others = append(others, err)
			}
		})
	}
	close(start)
	// Wait (bounded) until every caller was refused or is waiting.
	for wait := time.Now().Add(10 * time.Second); ; {
		mu.Lock()
		r := refused
		mu.Unlock()
		if int64(r)+pool.Stats().Waiting >= callers || time.Now().After(wait) {
			break
		}
		<-time.After(5 * time.Millisecond)
	}
	waiting := pool.Stats().Waiting
	close(release)
	wg.Wait()
	if err := <-holderDone; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d callers: %d refused, %d waited and were served, peak waiters %d", callers, refused, served, waiting)
	if refused != callers-2 || served != 2 || len(others) != 0 {
		t.Errorf("refused %d, served %d, other errors %v; want %d refused and 2 served", refused, served, others, callers-2)
	}
}

// TestConnStringOptionsWin: a statement_timeout or
// idle_in_transaction_session_timeout written in the connection string's
// options (the libpq way, -c name=value) wins over pgtx's defaults, as one
// written as a runtime parameter does.
func TestConnStringOptionsWin(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	tests := []struct {
		name, options, param, want string
	}{
		{"statement_timeout with -c", "-c statement_timeout=60000", "statement_timeout", "1min"},
		{"statement_timeout with --", "--statement_timeout=61000", "statement_timeout", "61s"},
		{"idle timeout with -c", "-c idle_in_transaction_session_timeout=70000", "idle_in_transaction_session_timeout", "70s"},
		{"other options leave the default", "-c work_mem=8MB", "statement_timeout", "5s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			u.RawQuery += "&options=" + strings.ReplaceAll(url.QueryEscape(tt.options), "+", "%20") // %20 for spaces, as libpq writes them
			pool := newPool(t, u.String(), nil)
			var got string
			if err := pool.QueryRow(ctx, "select current_setting($1)", tt.param).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("%s = %s, want %s", tt.param, got, tt.want)
			}
		})
	}
}

// TestPanickingHalfOpenProbeDoesNotWedge: a half-open probe whose fn panics
// counts as a failed probe and propagates; the breaker later lets healthy
// calls through again instead of refusing everything forever.
func TestPanickingHalfOpenProbeDoesNotWedge(t *testing.T) {
	ctx := testCtx(t)
	const openFor = 100 * time.Millisecond
	pool := newPool(t, newDB(t), func(c *pgtx.Config) {
		c.Retry.MaxAdaptiveRetries = -1
		c.Breaker = &pgtx.BreakerConfig{ConsecutiveFailures: 1, FailureRatio: -1, SlowCallRatio: -1, OpenFor: openFor}
	})
	overload := func(ctx context.Context, tx pgx.Tx) error { _, err := tx.Exec(ctx, raise("53300")); return err }
	if err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, overload); pgtx.Classify(err) != pgtx.ClassOverload {
		t.Fatalf("err = %v, want the overload that opens the breaker", err)
	}
	<-time.After(openFor + 20*time.Millisecond)
	func() {
		defer func() {
			if r := recover(); r != "probe panic" {
				t.Errorf("recovered %v, want the probe's panic", r)
			}
		}()
		_ = pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { panic("probe panic") })
	}()
	<-time.After(openFor + 20*time.Millisecond)
	for i := range 5 {
		if err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { return nil }); err != nil {
			t.Fatalf("healthy call %d: %v: the breaker is wedged", i, err)
		}
	}
}

// TestConnectionLostInsideFnIsNotAnUnknownCommit: fn swallows the error of
// a statement that ended its own session (57P01) and returns nil. COMMIT is
// never sent on a connection known to be closed: the transaction died with
// its session, so it runs again, and nothing reports an unknown outcome.
func TestConnectionLostInsideFnIsNotAnUnknownCommit(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table m (id text primary key)")
	pool := newPool(t, dsn, nil)
	attempts := 0
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		attempts++
		if _, err := tx.Exec(ctx, "insert into m values ('x')"); err != nil {
			return err
		}
		if attempts == 1 {
			_, _ = tx.Exec(ctx, "select pg_terminate_backend(pg_backend_pid())") // error swallowed
		}
		return nil
	})
	if err != nil || attempts != 2 {
		t.Fatalf("err = %v after %d attempts, want success on the second: COMMIT was never sent on the dead connection", err, attempts)
	}
	if n := queryInt(t, ctx, admin, "select count(*) from m"); n != 1 {
		t.Errorf("rows = %d, want 1", n)
	}
}

// TestRefusalInsideFnMatchesTheSentinel: the error fn gets from its own
// tx.Commit or tx.Rollback, before Transaction sees anything, matches
// pgtx.ErrInvalidArgument, the root's sentinel.
func TestRefusalInsideFnMatchesTheSentinel(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, newDB(t), nil)
	for _, end := range []func(pgx.Tx, context.Context) error{pgx.Tx.Commit, pgx.Tx.Rollback} {
		var refused error
		_ = pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			refused = end(tx, ctx)
			return nil
		})
		if !errors.Is(refused, pgtx.ErrInvalidArgument) {
			t.Errorf("fn's own Commit or Rollback: %v, want an error matching pgtx.ErrInvalidArgument", refused)
		}
	}
}
