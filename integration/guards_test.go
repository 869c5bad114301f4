package integration

// The guards of the v1 API, proven against a real server: AfterCommit runs
// once and only for the attempt that committed, Attempt counts the attempts,
// a nested Transaction on the same pool is refused at once, the final error
// says what happened, the context's deadline rides to the server, unique
// violations can be retried under SERIALIZABLE, sqlc's DBTX is satisfied by
// the Pool and by pgx.Tx, and the Pool's query methods cancel on the server
// and keep their connection.
//
// Every helper here is prefixed "guard" so this file depends on no other
// test file of the package.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/examples/repository/db"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// SQLSTATEs the guards expect from the server.
const (
	guardSerializationFailure = "40001"
	guardUniqueViolation      = "23505"
	guardCheckViolation       = "23514"
	guardQueryCanceled        = "57014"
)

// guardNoDeadline returns a context without a deadline (cancelled at
// cleanup), for the calls whose statement_timeout must not be shaped by one.
func guardNoDeadline(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// guardConn opens a plain pgx connection (no pgtx, no proxy): the server's
// view, from another session.
func guardConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// guardProxied returns a fresh database, a fault proxy in front of the
// server, and the DSN that goes through the proxy.
func guardProxied(t *testing.T) (direct string, proxy *faultproxy.Proxy, through string) {
	t.Helper()
	direct = pgtxtest.NewDatabase(t)
	proxy = faultproxy.New(t, server.Shared(t).Addr())
	through, err := proxy.DSN(direct)
	if err != nil {
		t.Fatal(err)
	}
	return direct, proxy, through
}

type guardExecer interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}

func guardExec(t *testing.T, ctx context.Context, db guardExecer, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

func guardInt(t *testing.T, ctx context.Context, conn *pgx.Conn, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// guardPgCode returns the SQLSTATE of the first *pgconn.PgError in err's
// tree, or "" when there is none.
func guardPgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// guardConflictSQL installs guard_conflict(failures): its first `failures`
// calls in the database (every call when failures < 0) raise a real
// serialization failure (SQLSTATE 40001) from the server. The count is a
// sequence because nextval is not rolled back with the failed transaction,
// so it survives into the retry.
var guardConflictSQL = []string{
	"create sequence guard_calls",
	`create function guard_conflict(failures int) returns void language plpgsql as $$
	declare
		n bigint := nextval('guard_calls');
	begin
		if failures < 0 or n <= failures then
			raise exception 'guard: injected serialization failure (call %)', n using errcode = 'serialization_failure';
		end if;
	end $$`,
}

// guardRaise returns a statement that fails with the given SQLSTATE.
func guardRaise(code string) string {
	return "do $$ begin raise exception 'guard: injected %', '" + code + "' using errcode = '" + code + "'; end $$"
}

// guardHook is what an AfterCommit hook saw when it ran.
type guardHook struct {
	attempt  int   // the attempt that registered it
	returned bool  // Transaction had already returned
	rows     int64 // rows of guard_ledger seen from another session
	last     int64 // the attempt that wrote the committed row
	acquired int32 // connections of the pool still acquired
}

// TestGuardAfterCommitOnceAfterRetries: a SERIALIZABLE transaction whose
// first attempt fails with a real 40001 from the server registers an
// AfterCommit hook in each attempt. Only the hook of the attempt that
// committed runs, exactly once, before Transaction returns, when the
// committed row is already visible from another session and the connection
// is back in the pool; the first attempt's hook is dropped with its
// rollback.
func TestGuardAfterCommitOnceAfterRetries(t *testing.T) {
	tests := []struct {
		name string
		// conflict runs at the end of each attempt's fn and fails on the
		// first attempt only, with a 40001 from the server.
		conflict func(ctx context.Context, tx pgx.Tx, other *pgx.Conn, attempt int) error
	}{
		{
			name: "raised 40001",
			conflict: func(ctx context.Context, tx pgx.Tx, _ *pgx.Conn, _ int) error {
				_, err := tx.Exec(ctx, "select guard_conflict(1)")
				return err
			},
		},
		{
			// A true write conflict: the transaction's snapshot was taken
			// by its first statement; another session then updates the row
			// and commits, and the transaction's own update of that row
			// fails with "could not serialize access due to concurrent
			// update". The interfering update runs on the test goroutine
			// between two statements of fn, so the order is fixed.
			name: "concurrent update",
			conflict: func(ctx context.Context, tx pgx.Tx, other *pgx.Conn, attempt int) error {
				if attempt == 1 {
					if _, err := other.Exec(ctx, "update guard_hot set v = v + 1 where id = 1"); err != nil {
						return pgtx.NonRetryable(fmt.Errorf("interfering update: %w", err))
					}
				}
				_, err := tx.Exec(ctx, "update guard_hot set v = v + 1 where id = 1")
				return err
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			dsn := pgtxtest.NewDatabase(t)
			other := guardConn(t, dsn)
			guardExec(t, ctx, other, guardConflictSQL...)
			guardExec(t, ctx, other,
				"create table guard_ledger (attempt int not null)",
				"create table guard_hot (id int primary key, v int not null)",
				"insert into guard_hot values (1, 0)")
			pool := newPool(t, dsn, nil)

			var (
				attempts []int
				firstErr error
				hooks    []guardHook
				returned bool
			)
			err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
				n := pgtx.Attempt(ctx)
				attempts = append(attempts, n)
				if err := pgtx.AfterCommit(ctx, func(hctx context.Context) {
					h := guardHook{attempt: n, returned: returned, acquired: pool.Stats().Pool.AcquiredConns()}
					if err := other.QueryRow(hctx, "select count(*), coalesce(max(attempt), 0) from guard_ledger").Scan(&h.rows, &h.last); err != nil {
						t.Errorf("hook: reading the ledger from another session: %v", err)
					}
					hooks = append(hooks, h)
				}); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, "insert into guard_ledger values ($1)", n); err != nil {
					return err
				}
				err := tc.conflict(ctx, tx, other, n)
				if n == 1 {
					firstErr = err
				}
				return err
			})
			returned = true
			if err != nil {
				t.Fatalf("Transaction: %v", err)
			}
			if code := guardPgCode(firstErr); code != guardSerializationFailure {
				t.Fatalf("the first attempt failed with %v (SQLSTATE %q), want a 40001 from the server", firstErr, code)
			}
			if !slices.Equal(attempts, []int{1, 2}) {
				t.Errorf("Attempt(ctx) in fn gave %v, want [1 2]", attempts)
			}
			if len(hooks) != 1 {
				t.Fatalf("AfterCommit hooks ran %d times (%+v), want exactly once", len(hooks), hooks)
			}
			h := hooks[0]
			if h.attempt != 2 {
				t.Errorf("the hook of attempt %d ran, want only the one of attempt 2 (the one that committed)", h.attempt)
			}
			if h.returned {
				t.Error("the hook ran after Transaction returned, want before")
			}
			if h.rows != 1 || h.last != 2 {
				t.Errorf("from another session the hook saw %d rows (last written by attempt %d), want the committed row of attempt 2 only",
					h.rows, h.last)
			}
			if h.acquired != 0 {
				t.Errorf("%d connections were still acquired when the hook ran, want the connection back in the pool", h.acquired)
			}
		})
	}
}

// TestGuardAfterCommitNotOnFailure: a call that does not commit runs none of
// the hooks its attempts registered.
func TestGuardAfterCommitNotOnFailure(t *testing.T) {
	errBoom := errors.New("guard: fn failed")
	tests := []struct {
		name string
		opts pgtx.Options
		// fn runs after the hook is registered and the row inserted.
		fn      func(ctx context.Context, tx pgx.Tx, cancel context.CancelFunc) error
		check   func(t *testing.T, err error)
		runs    int // fn's runs
		retried bool
	}{
		{
			name: "fn returns an error",
			fn:   func(context.Context, pgx.Tx, context.CancelFunc) error { return errBoom },
			check: func(t *testing.T, err error) {
				if !errors.Is(err, errBoom) {
					t.Errorf("err = %v, want fn's error", err)
				}
			},
			runs: 1,
		},
		{
			name: "server error",
			fn: func(ctx context.Context, tx pgx.Tx, _ context.CancelFunc) error {
				_, err := tx.Exec(ctx, guardRaise(guardCheckViolation))
				return err
			},
			check: func(t *testing.T, err error) {
				if code := guardPgCode(err); code != guardCheckViolation {
					t.Errorf("err = %v, want the server's 23514", err)
				}
			},
			runs: 1,
		},
		{
			name: "retries exhausted",
			opts: pgtx.Options{MaxRetries: 1},
			fn: func(ctx context.Context, tx pgx.Tx, _ context.CancelFunc) error {
				_, err := tx.Exec(ctx, "select guard_conflict(-1)")
				return err
			},
			check: func(t *testing.T, err error) {
				var re *pgtx.RetryError
				if !errors.As(err, &re) || re.Attempts != 2 {
					t.Errorf("err = %v, want a *RetryError after 2 attempts", err)
				}
			},
			runs: 2,
		},
		{
			name: "context ended while fn ran",
			fn: func(ctx context.Context, _ pgx.Tx, cancel context.CancelFunc) error {
				cancel()
				return nil // fn succeeded, but its caller is gone: rolled back, not committed
			},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("err = %v, want context.Canceled", err)
				}
			},
			runs: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			dsn := pgtxtest.NewDatabase(t)
			other := guardConn(t, dsn)
			guardExec(t, ctx, other, guardConflictSQL...)
			guardExec(t, ctx, other, "create table guard_ledger (attempt int not null)")
			pool := newPool(t, dsn, nil)

			callCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			runs, hooks := 0, 0
			err := pgtx.TransactionWithOptions(callCtx, pool, pgtx.Serializable, tc.opts, func(ctx context.Context, tx pgx.Tx) error {
				runs++
				if err := pgtx.AfterCommit(ctx, func(context.Context) { hooks++ }); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, "insert into guard_ledger values ($1)", pgtx.Attempt(ctx)); err != nil {
					return err
				}
				return tc.fn(ctx, tx, cancel)
			})
			tc.check(t, err)
			if runs != tc.runs {
				t.Errorf("fn ran %d times, want %d", runs, tc.runs)
			}
			if hooks != 0 {
				t.Errorf("AfterCommit hooks ran %d times for a call that failed (%v), want none", hooks, err)
			}
			if n := guardInt(t, ctx, other, "select count(*) from guard_ledger"); n != 0 {
				t.Errorf("%d rows committed by a call that failed", n)
			}
		})
	}
}

// TestGuardAfterCommitLostCommit: the proxy lets COMMIT reach the server and
// run, then drops its answer and cuts the connection. When resolution is off
// the outcome is unknown (ErrCommitUnknown) and the hook does not run, though
// the row did commit: the caller, who sees the error, decides. When
// resolution asks the server and learns the transaction committed, the call
// succeeds and the hook runs once, seeing the row.
func TestGuardAfterCommitLostCommit(t *testing.T) {
	tests := []struct {
		name      string
		resolve   time.Duration // Config.ResolveTimeout
		wantErr   error         // nil: the call succeeds
		wantHooks int
	}{
		{name: "unresolvable", resolve: -1, wantErr: pgtx.ErrCommitUnknown, wantHooks: 0},
		{name: "resolved as committed", resolve: 0, wantErr: nil, wantHooks: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			direct, proxy, through := guardProxied(t)
			other := guardConn(t, direct)
			guardExec(t, ctx, other, "create table guard_ledger (attempt int not null)")
			pool := newPool(t, through, func(c *pgtx.Config) { c.ResolveTimeout = tc.resolve })

			proxy.CutOnCommitReply(1)
			runs := 0
			var seen []int64
			err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
				runs++
				if err := pgtx.AfterCommit(ctx, func(hctx context.Context) {
					seen = append(seen, guardInt(t, hctx, other, "select count(*) from guard_ledger"))
				}); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "insert into guard_ledger values (1)")
				return err
			})
			if cuts := proxy.Stats().CutsOnCommitReply; cuts != 1 {
				t.Fatalf("the proxy dropped %d COMMIT answers, want 1", cuts)
			}
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("err = %v: a lost COMMIT the server applied must resolve to success", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if runs != 1 {
				t.Errorf("fn ran %d times, want 1", runs)
			}
			if len(seen) != tc.wantHooks {
				t.Fatalf("AfterCommit hooks ran %d times, want %d", len(seen), tc.wantHooks)
			}
			if tc.wantHooks > 0 {
				if seen[0] != 1 {
					t.Errorf("the hook saw %d rows from another session, want the committed row", seen[0])
				}
				if r := pool.Stats().Resolved; r.CommittedCount != 1 {
					t.Errorf("resolutions %+v, want one committed", r)
				}
			}
			// The COMMIT was applied in both cases: the unknown outcome was
			// ambiguous, not a failure.
			if n := guardInt(t, ctx, other, "select count(*) from guard_ledger"); n != 1 {
				t.Errorf("%d rows, want the committed row once", n)
			}
		})
	}
}

// TestGuardAfterCommitMisuse: hooks run in the order they were registered;
// AfterCommit with a context that is not fn's, or after fn returned, is
// refused with ErrInvalidArgument and registers nothing.
func TestGuardAfterCommitMisuse(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, pgtxtest.NewDatabase(t), nil)

	if err := pgtx.AfterCommit(ctx, func(context.Context) {}); !errors.Is(err, pgtx.ErrInvalidArgument) {
		t.Errorf("AfterCommit outside a Transaction: err = %v, want ErrInvalidArgument", err)
	}
	var (
		order   []int
		fnCtx   context.Context
		lateRan bool
	)
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		fnCtx = ctx
		for i := range 3 {
			if err := pgtx.AfterCommit(ctx, func(context.Context) { order = append(order, i) }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Transaction: %v", err)
	}
	if !slices.Equal(order, []int{0, 1, 2}) {
		t.Errorf("hooks ran in order %v, want [0 1 2]", order)
	}
	if err := pgtx.AfterCommit(fnCtx, func(context.Context) { lateRan = true }); !errors.Is(err, pgtx.ErrInvalidArgument) {
		t.Errorf("AfterCommit after fn returned: err = %v, want ErrInvalidArgument", err)
	}
	if lateRan {
		t.Error("a hook registered after fn returned ran")
	}
}

// TestGuardAttempt: Attempt(ctx) inside fn is 1 on the first attempt and
// counts the retries (also through a context derived from fn's); it is 0 for
// a context outside; TransactionValue returns the value of the attempt that
// committed.
func TestGuardAttempt(t *testing.T) {
	if n := pgtx.Attempt(context.Background()); n != 0 {
		t.Errorf("Attempt(context.Background()) = %d, want 0", n)
	}
	type key struct{}
	for _, failures := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("%d conflicts", failures), func(t *testing.T) {
			ctx := testCtx(t)
			dsn := pgtxtest.NewDatabase(t)
			admin := guardConn(t, dsn)
			guardExec(t, ctx, admin, guardConflictSQL...)
			pool := newPool(t, dsn, nil)

			var seen, derived []int
			got, err := pgtx.TransactionValue(ctx, pool, pgtx.Serializable, pgtx.Options{},
				func(ctx context.Context, tx pgx.Tx) (int, error) {
					n := pgtx.Attempt(ctx)
					seen = append(seen, n)
					dctx, cancel := context.WithTimeout(context.WithValue(ctx, key{}, n), time.Minute)
					defer cancel()
					derived = append(derived, pgtx.Attempt(dctx))
					_, err := tx.Exec(dctx, "select guard_conflict($1)", failures)
					return n, err
				})
			if err != nil {
				t.Fatalf("TransactionValue: %v", err)
			}
			want := make([]int, failures+1)
			for i := range want {
				want[i] = i + 1
			}
			if !slices.Equal(seen, want) {
				t.Errorf("Attempt(ctx) in fn gave %v, want %v", seen, want)
			}
			if !slices.Equal(derived, want) {
				t.Errorf("Attempt on a context derived from fn's gave %v, want %v", derived, want)
			}
			if got != failures+1 {
				t.Errorf("TransactionValue returned %d, want %d (the value of the attempt that committed)", got, failures+1)
			}
			if n := pgtx.Attempt(ctx); n != 0 {
				t.Errorf("Attempt(caller's ctx) = %d after the call, want 0", n)
			}
		})
	}
}

// TestGuardNestedSamePoolRefused: with one connection and AcquireTimeout 2s,
// a Transaction on the same pool called with fn's context (or one derived
// from it) is refused at once with an error matching ErrInvalidArgument instead of waiting
// out the acquire timeout; its fn never runs, and the outer transaction
// still commits when its fn ignores the error.
func TestGuardNestedSamePoolRefused(t *testing.T) {
	type key struct{}
	inner := func(ran *bool) func(context.Context, pgx.Tx) error {
		return func(context.Context, pgx.Tx) error { *ran = true; return nil }
	}
	tests := []struct {
		name string
		nest func(ctx context.Context, pool *pgtx.Pool, ran *bool) error
	}{
		{name: "Transaction with fn's ctx", nest: func(ctx context.Context, pool *pgtx.Pool, ran *bool) error {
			return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, inner(ran))
		}},
		{name: "derived context", nest: func(ctx context.Context, pool *pgtx.Pool, ran *bool) error {
			dctx, cancel := context.WithTimeout(context.WithValue(ctx, key{}, 1), time.Minute)
			defer cancel()
			return pgtx.Transaction(dctx, pool, pgtx.Serializable, inner(ran))
		}},
		{name: "TransactionWithOptions", nest: func(ctx context.Context, pool *pgtx.Pool, ran *bool) error {
			return pgtx.TransactionWithOptions(ctx, pool, pgtx.RepeatableRead, pgtx.Options{Label: "nested"}, inner(ran))
		}},
		{name: "TransactionValue", nest: func(ctx context.Context, pool *pgtx.Pool, ran *bool) error {
			_, err := pgtx.TransactionValue(ctx, pool, pgtx.ReadCommitted, pgtx.Options{}, func(ctx context.Context, tx pgx.Tx) (int, error) {
				*ran = true
				return 1, nil
			})
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			dsn := pgtxtest.NewDatabase(t)
			admin := guardConn(t, dsn)
			guardExec(t, ctx, admin, "create table guard_ledger (who text not null)")
			pool := newPool(t, dsn, func(c *pgtx.Config) {
				c.MaxConns = 1
				c.AcquireTimeout = 2 * time.Second
			})

			var (
				nestedErr error
				elapsed   time.Duration
				innerRan  bool
			)
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				start := time.Now()
				nestedErr = tc.nest(ctx, pool, &innerRan)
				elapsed = time.Since(start)
				// fn ignores the refusal; the transaction must be intact.
				_, err := tx.Exec(ctx, "insert into guard_ledger values ('outer')")
				return err
			})
			if err != nil {
				t.Fatalf("the outer Transaction: %v", err)
			}
			if !errors.Is(nestedErr, pgtx.ErrInvalidArgument) || !strings.Contains(nestedErr.Error(), "nested Transaction") {
				t.Errorf("nested call: err = %v, want a nested-Transaction error matching ErrInvalidArgument", nestedErr)
			}
			// A correctness bound, not a performance target: a refusal that
			// waited for the pool would take the AcquireTimeout (2s).
			if elapsed >= time.Second {
				t.Errorf("the nested call took %v to be refused, want at once (well under AcquireTimeout 2s)", elapsed)
			}
			if innerRan {
				t.Error("the nested call's fn ran")
			}
			if n := pool.Stats().AcquireTimeoutCount; n != 0 {
				t.Errorf("%d acquire timeouts: the nested call waited for the pool", n)
			}
			if n := guardInt(t, ctx, admin, "select count(*) from guard_ledger where who = 'outer'"); n != 1 {
				t.Errorf("%d outer rows committed, want 1", n)
			}
		})
	}
}

// TestGuardNestedOtherPoolAllowed: a Transaction on a different pool called
// with fn's context runs and commits on its own: its row is visible from
// another session while the outer transaction is still open, and stays when
// the outer one rolls back. A call back onto the outer pool from inside the
// inner one is still refused (the whole chain counts).
func TestGuardNestedOtherPoolAllowed(t *testing.T) {
	ctx := testCtx(t)
	dsn := pgtxtest.NewDatabase(t)
	admin := guardConn(t, dsn)
	guardExec(t, ctx, admin, "create table guard_ledger (who text not null)")
	one := func(c *pgtx.Config) { c.MaxConns = 1; c.AcquireTimeout = 2 * time.Second }
	outerPool, innerPool := newPool(t, dsn, one), newPool(t, dsn, one)
	errRollback := errors.New("guard: roll the outer transaction back")

	var (
		innerErr, backErr   error
		innerAttempt        int
		outerAfter          int
		innerVisible        int64
		outerVisible        int64
		innerHooks          int
		innerHookBeforeBack bool
	)
	err := pgtx.Transaction(ctx, outerPool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "insert into guard_ledger values ('outer')"); err != nil {
			return err
		}
		innerErr = pgtx.Transaction(ctx, innerPool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			innerAttempt = pgtx.Attempt(ctx)
			if err := pgtx.AfterCommit(ctx, func(context.Context) { innerHooks++ }); err != nil {
				return err
			}
			start := time.Now()
			backErr = pgtx.Transaction(ctx, outerPool, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
			if d := time.Since(start); d >= time.Second {
				return fmt.Errorf("the call back onto the outer pool took %v to be refused", d)
			}
			_, err := tx.Exec(ctx, "insert into guard_ledger values ('inner')")
			return err
		})
		innerHookBeforeBack = innerHooks == 1
		outerAfter = pgtx.Attempt(ctx)
		if err := admin.QueryRow(ctx, "select count(*) filter (where who = 'inner'), count(*) filter (where who = 'outer') from guard_ledger").
			Scan(&innerVisible, &outerVisible); err != nil {
			return pgtx.NonRetryable(err)
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatalf("the outer Transaction: err = %v, want fn's error", err)
	}
	if innerErr != nil {
		t.Fatalf("the inner Transaction on another pool: %v", innerErr)
	}
	if !errors.Is(backErr, pgtx.ErrInvalidArgument) || !strings.Contains(backErr.Error(), "nested Transaction") {
		t.Errorf("a call back onto the outer pool from the inner fn: err = %v, want a nested-Transaction error", backErr)
	}
	if innerAttempt != 1 || outerAfter != 1 {
		t.Errorf("Attempt: inner %d, outer after the inner call %d; want 1 and 1", innerAttempt, outerAfter)
	}
	if !innerHookBeforeBack {
		t.Errorf("the inner call's hook ran %d times before it returned, want once", innerHooks)
	}
	if innerVisible != 1 || outerVisible != 0 {
		t.Errorf("while the outer transaction was open another session saw %d inner and %d outer rows, want 1 and 0",
			innerVisible, outerVisible)
	}
	var inner, outer int64
	if err := admin.QueryRow(ctx, "select count(*) filter (where who = 'inner'), count(*) filter (where who = 'outer') from guard_ledger").
		Scan(&inner, &outer); err != nil {
		t.Fatal(err)
	}
	if inner != 1 || outer != 0 {
		t.Errorf("after the outer rollback: %d inner and %d outer rows, want the inner one only", inner, outer)
	}
}

// TestGuardRetryErrorSaysWhatHappened: the final error of a call that was
// retried (or whose retry was refused) is a *RetryError that counts the
// attempts, says why there were no more, and keeps the server's error
// reachable; an error that ended a first attempt and would never have been
// retried is returned as it is.
func TestGuardRetryErrorSaysWhatHappened(t *testing.T) {
	tests := []struct {
		name       string
		opts       pgtx.Options
		stmt       func(attempt int) string // what each attempt runs
		wantPlain  bool                     // the error is not a *RetryError
		attempts   int
		wantPrefix string
		wantCode   string
	}{
		{
			name:       "always conflicts, MaxRetries 2",
			opts:       pgtx.Options{MaxRetries: 2},
			stmt:       func(int) string { return "select guard_conflict(-1)" },
			attempts:   3,
			wantPrefix: "pgtx: gave up after 3 attempts (MaxRetries 2): ",
			wantCode:   guardSerializationFailure,
		},
		{
			name:       "always conflicts, MaxRetries 1",
			opts:       pgtx.Options{MaxRetries: 1},
			stmt:       func(int) string { return "select guard_conflict(-1)" },
			attempts:   2,
			wantPrefix: "pgtx: gave up after 2 attempts (MaxRetries 1): ",
			wantCode:   guardSerializationFailure,
		},
		{
			name:       "conflict retries off",
			opts:       pgtx.Options{MaxRetries: -1},
			stmt:       func(int) string { return "select guard_conflict(-1)" },
			attempts:   1,
			wantPrefix: "pgtx: gave up after 1 attempt (MaxRetries off): ",
			wantCode:   guardSerializationFailure,
		},
		{
			name: "a conflict, then a permanent error",
			stmt: func(attempt int) string {
				if attempt == 1 {
					return "select guard_conflict(-1)"
				}
				return guardRaise(guardCheckViolation)
			},
			attempts:   2,
			wantPrefix: "pgtx: failed after 2 attempts (not retryable: permanent): ",
			wantCode:   guardCheckViolation,
		},
		{
			name:      "a permanent error on the first attempt",
			stmt:      func(int) string { return guardRaise(guardCheckViolation) },
			wantPlain: true,
			attempts:  1,
			wantCode:  guardCheckViolation,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			dsn := pgtxtest.NewDatabase(t)
			admin := guardConn(t, dsn)
			guardExec(t, ctx, admin, guardConflictSQL...)
			pool := newPool(t, dsn, nil)

			runs := 0
			var fnErr error // what fn returned last
			err := pgtx.TransactionWithOptions(ctx, pool, pgtx.Serializable, tc.opts, func(ctx context.Context, tx pgx.Tx) error {
				runs++
				_, fnErr = tx.Exec(ctx, tc.stmt(pgtx.Attempt(ctx)))
				return fnErr
			})
			if runs != tc.attempts {
				t.Errorf("fn ran %d times, want %d", runs, tc.attempts)
			}
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != tc.wantCode {
				t.Fatalf("err = %v: errors.As must find the server's *pgconn.PgError with SQLSTATE %s", err, tc.wantCode)
			}
			var re *pgtx.RetryError
			isRetryErr := errors.As(err, &re)
			if tc.wantPlain {
				if isRetryErr {
					t.Errorf("err = %v is a *RetryError, want the server's error as it is", err)
				}
				if err != fnErr {
					t.Errorf("err = %v (%T), want fn's error itself (%T)", err, err, fnErr)
				}
				return
			}
			if !isRetryErr {
				t.Fatalf("err = %v (%T), want a *pgtx.RetryError", err, err)
			}
			if re.Attempts != tc.attempts {
				t.Errorf("RetryError.Attempts = %d, want %d", re.Attempts, tc.attempts)
			}
			if !strings.HasPrefix(err.Error(), tc.wantPrefix) {
				t.Errorf("message %q, want it to begin %q", err.Error(), tc.wantPrefix)
			}
			if !strings.HasSuffix(err.Error(), pgErr.Error()) {
				t.Errorf("message %q does not end with the server's error %q", err.Error(), pgErr.Error())
			}
			if re.Err != fnErr || errors.Unwrap(err) != fnErr {
				t.Errorf("RetryError.Err = %v, unwraps to %v; want the last attempt's error %v", re.Err, errors.Unwrap(err), fnErr)
			}
		})
	}
}

// guardSetting reads the statement_timeout in force, in milliseconds.
func guardSetting(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (time.Duration, string, error) {
	var ms int64
	var shown string
	if err := q.QueryRow(ctx, "select setting::bigint, current_setting('statement_timeout') from pg_settings where name = 'statement_timeout'").
		Scan(&ms, &shown); err != nil {
		return 0, "", err
	}
	return time.Duration(ms) * time.Millisecond, shown, nil
}

// TestGuardDeadlineStatementTimeout: the context's deadline rides to the
// server as the transaction's statement_timeout (SET LOCAL, sent with BEGIN):
// the time left plus pgtx's 100ms margin, never above the one in force (the
// pool's 5s, or a shorter Options.StatementTimeout, which wins over a later
// deadline). After the transaction the session's 5s is back.
func TestGuardDeadlineStatementTimeout(t *testing.T) {
	const session = 5 * time.Second // Config.StatementTimeout's default
	tests := []struct {
		name     string
		deadline time.Duration // 0: none
		opt      time.Duration // Options.StatementTimeout
		min, max time.Duration // the statement_timeout seen inside fn
	}{
		{name: "no deadline", min: session, max: session},
		{name: "deadline 1.5s", deadline: 1500 * time.Millisecond, min: time.Second, max: 1600 * time.Millisecond},
		{name: "deadline later than the session's", deadline: 30 * time.Second, min: session, max: session},
		{name: "Options.StatementTimeout shorter than the deadline wins", deadline: 1500 * time.Millisecond, opt: 300 * time.Millisecond,
			min: 300 * time.Millisecond, max: 300 * time.Millisecond},
		{name: "deadline shorter than Options.StatementTimeout wins", deadline: 1500 * time.Millisecond, opt: 3 * time.Second,
			min: time.Second, max: 1600 * time.Millisecond},
		{name: "Options.StatementTimeout, no deadline", opt: 3 * time.Second, min: 3 * time.Second, max: 3 * time.Second},
		{name: "Options.StatementTimeout off, no deadline", opt: -1, min: 0, max: 0},
		{name: "Options.StatementTimeout off, deadline 1.5s", deadline: 1500 * time.Millisecond, opt: -1,
			min: time.Second, max: 1600 * time.Millisecond},
	}
	ctx := testCtx(t)
	// One connection, so the plain query after the transaction reads the
	// very session the transaction ran on.
	pool := newPool(t, pgtxtest.NewDatabase(t), func(c *pgtx.Config) { c.MaxConns = 1 })
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			callCtx := guardNoDeadline(t)
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				callCtx, cancel = context.WithTimeout(callCtx, tc.deadline)
				defer cancel()
			}
			var (
				inside time.Duration
				shown  string
				txPID  uint32
			)
			err := pgtx.TransactionWithOptions(callCtx, pool, pgtx.ReadCommitted, pgtx.Options{StatementTimeout: tc.opt},
				func(ctx context.Context, tx pgx.Tx) error {
					txPID = tx.Conn().PgConn().PID()
					var err error
					inside, shown, err = guardSetting(ctx, tx)
					return err
				})
			if err != nil {
				t.Fatalf("Transaction: %v", err)
			}
			t.Logf("statement_timeout inside fn: %s", shown)
			if inside < tc.min || inside > tc.max {
				t.Errorf("statement_timeout inside fn = %v (show: %s), want between %v and %v", inside, shown, tc.min, tc.max)
			}
			var pid uint32
			if err := pool.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
				t.Fatal(err)
			}
			after, shownAfter, err := guardSetting(ctx, pool)
			if err != nil {
				t.Fatal(err)
			}
			if pid != txPID {
				t.Fatalf("the plain query ran on backend %d, the transaction on %d: want the same session", pid, txPID)
			}
			if after != session {
				t.Errorf("statement_timeout after the transaction = %v (show: %s), want the session's %v: the deadline's must be SET LOCAL",
					after, shownAfter, session)
			}
		})
	}
}

// TestGuardDeadlineStopsServerWork: the server itself stops a transaction's
// work when the caller's deadline passes, even if the client never cancels.
//
// The variant chosen to make it deterministic: fn runs pg_sleep(10) with
// context.WithoutCancel(ctx), so the client watches no context for that
// statement and sends no cancel at all (no proxy trickery needed, and no
// race with a cancel that might or might not get through). The only thing
// that can stop the sleep is the statement_timeout pgtx sent with BEGIN from
// the call's 1s deadline. The server reports that with its own message,
// "canceling statement due to statement timeout" (a client cancel says "due
// to user request"), long before both the 10s sleep and the session's 5s
// statement_timeout, and pg_stat_activity shows the backend idle
// afterwards: the work really stopped on the server.
func TestGuardDeadlineStopsServerWork(t *testing.T) {
	ctx := testCtx(t)
	dsn := pgtxtest.NewDatabase(t)
	admin := guardConn(t, dsn)
	pool := newPool(t, dsn, nil)

	callCtx, cancel := context.WithTimeout(guardNoDeadline(t), time.Second)
	defer cancel()
	deadline, _ := callCtx.Deadline()
	var (
		pid      uint32
		sleepErr error
		slept    time.Duration // from the deadline's start: the call's 1s
	)
	err := pgtx.Transaction(callCtx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		pid = tx.Conn().PgConn().PID()
		_, sleepErr = tx.Exec(context.WithoutCancel(ctx), "select pg_sleep(10)")
		slept = time.Since(deadline.Add(-time.Second))
		return sleepErr
	})
	t.Logf("pg_sleep(10) with a 1s deadline and no client cancel: %v after %v", sleepErr, slept)
	var pgErr *pgconn.PgError
	if !errors.As(sleepErr, &pgErr) || pgErr.Code != guardQueryCanceled {
		t.Fatalf("pg_sleep returned %v after %v, want the server's 57014", sleepErr, slept)
	}
	if !strings.Contains(pgErr.Message, "statement timeout") {
		t.Errorf("the server said %q, want its statement timeout to have stopped the sleep", pgErr.Message)
	}
	// The sleep ran at least until the deadline (the timeout is the time
	// left when the statement was sent, plus a margin) and far less than
	// the session's 5s timeout. It is timed from the call's start: on a
	// loaded machine the statement itself may start late.
	if slept < 900*time.Millisecond || slept >= 3*time.Second {
		t.Errorf("the server stopped the sleep after %v, want about the 1s deadline (plus pgtx's margin)", slept)
	}
	if !errors.Is(err, context.DeadlineExceeded) || guardPgCode(err) != guardQueryCanceled {
		t.Errorf("Transaction: err = %v, want it to match context.DeadlineExceeded with the 57014 reachable", err)
	}
	var state, query string
	if err := admin.QueryRow(ctx, "select coalesce(state, ''), query from pg_stat_activity where pid = $1", pid).Scan(&state, &query); err != nil {
		t.Fatalf("pg_stat_activity of backend %d: %v", pid, err)
	}
	if state == "active" {
		t.Errorf("backend %d is still %s running %q", pid, state, query)
	}
}

// TestGuardUniqueViolationRetry: a transaction that checks a key is free and
// then inserts it loses to a concurrent one that inserted the key first.
//
// The design that makes the loser's error a real 23505: the winner inserts
// the key blindly (it reads nothing). The loser's check took a predicate
// lock that the winner's insert conflicts with (loser -rw-> winner), but
// there is no cycle, so the server's serializable checks find nothing and
// the loser's insert, after the winner committed, fails on the unique index
// with 23505. (When the winner checked too, both reads conflict with both
// writes and PostgreSQL reports 40001 instead: the last case.) The steps are
// ordered by channels: the loser checks, then the winner inserts and
// commits, then the loser inserts.
//
// With RetryUniqueViolations under SERIALIZABLE the 23505 is retried: the
// loser's second attempt sees the winner's row and takes its other path,
// inserting nothing. With the option off the 23505 is returned (permanent,
// not retried); at other levels the option is ignored.
func TestGuardUniqueViolationRetry(t *testing.T) {
	tests := []struct {
		name         string
		iso          pgtx.Isolation
		retryUnique  bool
		winnerChecks bool
		firstCode    string // the loser's first attempt fails with it
		wantRetry    bool   // the loser is retried and then finds the row
	}{
		// First the case that proves the design: without the option the
		// server's 23505 surfaces.
		{name: "serializable, option off", iso: pgtx.Serializable, firstCode: guardUniqueViolation},
		{name: "serializable, option on", iso: pgtx.Serializable, retryUnique: true, firstCode: guardUniqueViolation, wantRetry: true},
		{name: "repeatable read, option ignored", iso: pgtx.RepeatableRead, retryUnique: true, firstCode: guardUniqueViolation},
		{name: "read committed, option ignored", iso: pgtx.ReadCommitted, retryUnique: true, firstCode: guardUniqueViolation},
		{name: "serializable, both check: the server says 40001", iso: pgtx.Serializable, winnerChecks: true,
			firstCode: guardSerializationFailure, wantRetry: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(testCtx(t))
			dsn := pgtxtest.NewDatabase(t)
			admin := guardConn(t, dsn)
			guardExec(t, ctx, admin, "create table guard_keys (k int not null, who text not null)",
				"create unique index on guard_keys (k)")
			pool := newPool(t, dsn, func(c *pgtx.Config) { c.MaxConns = 4 })

			loserChecked := make(chan struct{})
			winnerDone := make(chan error, 1)
			var wg sync.WaitGroup
			t.Cleanup(wg.Wait)
			t.Cleanup(cancel) // runs first: unblocks the winner if the loser never checked
			wg.Go(func() {
				select {
				case <-loserChecked:
				case <-ctx.Done():
					winnerDone <- ctx.Err()
					return
				}
				winnerDone <- pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
					if tc.winnerChecks {
						var n int
						if err := tx.QueryRow(ctx, "select count(*) from guard_keys where k = 1").Scan(&n); err != nil {
							return err
						}
						if n != 0 {
							return pgtx.NonRetryable(fmt.Errorf("the winner found %d rows before the loser inserted", n))
						}
					}
					_, err := tx.Exec(ctx, "insert into guard_keys values (1, 'winner')")
					return err
				})
			})

			var (
				attempts []int
				firstErr error
				found    []bool
			)
			err := pgtx.TransactionWithOptions(ctx, pool, tc.iso, pgtx.Options{RetryUniqueViolations: tc.retryUnique},
				func(ctx context.Context, tx pgx.Tx) error {
					n := pgtx.Attempt(ctx)
					attempts = append(attempts, n)
					var rows int
					if err := tx.QueryRow(ctx, "select count(*) from guard_keys where k = 1").Scan(&rows); err != nil {
						return err
					}
					found = append(found, rows > 0)
					if rows > 0 {
						return nil // the other path: the key is taken, nothing to insert
					}
					if n == 1 {
						close(loserChecked)
						select {
						case err := <-winnerDone:
							if err != nil {
								return pgtx.NonRetryable(fmt.Errorf("the winner: %w", err))
							}
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					_, err := tx.Exec(ctx, "insert into guard_keys values (1, 'loser')")
					if n == 1 {
						firstErr = err
					}
					return err
				})
			if code := guardPgCode(firstErr); code != tc.firstCode {
				t.Fatalf("the loser's first insert failed with %v (SQLSTATE %q), want %s", firstErr, code, tc.firstCode)
			}
			if tc.wantRetry {
				if err != nil {
					t.Fatalf("the loser: err = %v, want it retried and then nil", err)
				}
				if !slices.Equal(attempts, []int{1, 2}) || !slices.Equal(found, []bool{false, true}) {
					t.Errorf("the loser's attempts %v found the key %v, want [1 2] finding it on the second", attempts, found)
				}
			} else {
				if code := guardPgCode(err); code != guardUniqueViolation {
					t.Fatalf("the loser: err = %v, want the server's 23505", err)
				}
				var re *pgtx.RetryError
				if errors.As(err, &re) {
					t.Errorf("the loser: err = %v is a *RetryError, want the 23505 as it is (never retried)", err)
				}
				if c := pgtx.Classify(err); c != pgtx.ClassPermanent {
					t.Errorf("Classify(23505) = %v, want permanent", c)
				}
				if !slices.Equal(attempts, []int{1}) {
					t.Errorf("the loser ran attempts %v, want [1]", attempts)
				}
			}
			var rows int64
			var who string
			if err := admin.QueryRow(ctx, "select count(*), min(who) from guard_keys").Scan(&rows, &who); err != nil {
				t.Fatal(err)
			}
			if rows != 1 || who != "winner" {
				t.Errorf("guard_keys holds %d rows (first by %q), want the winner's only", rows, who)
			}
		})
	}
}

// TestGuardUniqueViolationTrueDuplicate: the documented price of the option:
// a true duplicate (a transaction that does not check first) is retried up
// to MaxRetries before its 23505 is returned.
func TestGuardUniqueViolationTrueDuplicate(t *testing.T) {
	ctx := testCtx(t)
	dsn := pgtxtest.NewDatabase(t)
	admin := guardConn(t, dsn)
	guardExec(t, ctx, admin, "create table guard_keys (k int primary key)", "insert into guard_keys values (1)")
	pool := newPool(t, dsn, nil)

	runs := 0
	err := pgtx.TransactionWithOptions(ctx, pool, pgtx.Serializable, pgtx.Options{RetryUniqueViolations: true, MaxRetries: 2},
		func(ctx context.Context, tx pgx.Tx) error {
			runs++
			_, err := tx.Exec(ctx, "insert into guard_keys values (1)")
			return err
		})
	var re *pgtx.RetryError
	if !errors.As(err, &re) || re.Attempts != 3 || guardPgCode(err) != guardUniqueViolation {
		t.Fatalf("err = %v, want a *RetryError after 3 attempts wrapping the 23505", err)
	}
	if !strings.HasPrefix(err.Error(), "pgtx: gave up after 3 attempts (MaxRetries 2): ") {
		t.Errorf("message %q", err)
	}
	if runs != 3 {
		t.Errorf("fn ran %d times, want 3", runs)
	}
}

// sqlc's interfaces: DBTX of the repository example's sqlc-style package
// (examples/repository/db, in the exact shape sqlc generates for pgx/v5,
// CopyFrom included), and the SendBatch method sqlc adds to it when the
// queries include :batch ones. Both *pgtx.Pool and pgx.Tx satisfy them,
// checked at compile time.
type guardBatchDBTX interface {
	db.DBTX
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}

var (
	_ db.DBTX        = (*pgtx.Pool)(nil)
	_ db.DBTX        = pgx.Tx(nil)
	_ guardBatchDBTX = (*pgtx.Pool)(nil)
	_ guardBatchDBTX = pgx.Tx(nil)
)

// TestGuardDBTX: one set of sqlc-style queries runs through the pool (a
// CopyFrom, a :one, a :many) and through the pgx.Tx Transaction hands fn
// (WithTx), where the writes are the transaction's: committed with it, or
// rolled back with it.
func TestGuardDBTX(t *testing.T) {
	ctx := testCtx(t)
	schema, err := os.ReadFile("../examples/repository/db/schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, pgtxtest.NewDatabase(t), func(c *pgtx.Config) {
		c.ConnConfig.RuntimeParams["search_path"] = "pgtx_repository_example"
	})
	guardExec(t, ctx, pool, string(schema))
	q := db.New(pool)

	n, err := q.CreateAccounts(ctx, []db.CreateAccountsParams{{Owner: "a", Balance: 1}, {Owner: "b", Balance: 2}, {Owner: "c", Balance: 3}})
	if err != nil || n != 3 {
		t.Fatalf("CreateAccounts (CopyFrom) through the pool: %d rows, %v; want 3", n, err)
	}
	if accts, err := q.ListAccounts(ctx); err != nil || len(accts) != 3 {
		t.Fatalf("ListAccounts through the pool: %d, %v; want 3", len(accts), err)
	}

	err = pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		qtx := q.WithTx(tx)
		acct, err := qtx.CreateAccount(ctx, db.CreateAccountParams{Owner: "d", Balance: 4})
		if err != nil {
			return err
		}
		if acct.Owner != "d" || acct.Balance != 4 {
			return pgtx.NonRetryable(fmt.Errorf("CreateAccount returned %+v", acct))
		}
		if err := qtx.UpdateBalance(ctx, db.UpdateBalanceParams{ID: 1, Balance: 10}); err != nil {
			return err
		}
		if _, err := qtx.CreateAccounts(ctx, []db.CreateAccountsParams{{Owner: "e", Balance: 5}}); err != nil {
			return err
		}
		accts, err := qtx.ListAccounts(ctx)
		if err != nil {
			return err
		}
		if len(accts) != 5 || accts[0].Balance != 10 {
			return pgtx.NonRetryable(fmt.Errorf("ListAccounts in the transaction: %+v", accts))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Transaction through WithTx: %v", err)
	}

	errRollback := errors.New("guard: roll back")
	err = pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := q.WithTx(tx).CreateAccount(ctx, db.CreateAccountParams{Owner: "f", Balance: 6}); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatalf("rolled-back Transaction: err = %v", err)
	}

	accts, err := q.ListAccounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var owners []string
	for _, a := range accts {
		owners = append(owners, a.Owner)
	}
	if want := []string{"a", "b", "c", "d", "e"}; !slices.Equal(owners, want) {
		t.Errorf("accounts through the pool: %v, want %v (the committed writes, not the rolled-back one)", owners, want)
	}
	if acct, err := q.GetAccount(ctx, 1); err != nil || acct.Balance != 10 {
		t.Errorf("GetAccount(1) through the pool: %+v, %v", acct, err)
	}
}

// TestGuardPoolMethodsCancelOnServer: each query method of the Pool, with a
// context that ends while the server sleeps, returns an error matching
// context.DeadlineExceeded with the server's 57014 ("due to user request":
// the client's cancel, not a server timeout) reachable, the cancel was a
// pg_cancel_backend that signalled the backend (Cancels.SignalledCount), and
// the pool's only connection is reused: no new connection, same backend.
func TestGuardPoolMethodsCancelOnServer(t *testing.T) {
	const sleep = "select pg_sleep(10)"
	tests := []struct {
		name string
		run  func(ctx context.Context, pool *pgtx.Pool) error
	}{
		{name: "Exec", run: func(ctx context.Context, pool *pgtx.Pool) error {
			_, err := pool.Exec(ctx, sleep)
			return err
		}},
		{name: "Query", run: func(ctx context.Context, pool *pgtx.Pool) error {
			rows, err := pool.Query(ctx, sleep)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
			}
			return rows.Err()
		}},
		{name: "QueryRow", run: func(ctx context.Context, pool *pgtx.Pool) error {
			var v any
			return pool.QueryRow(ctx, sleep).Scan(&v)
		}},
		{name: "SendBatch", run: func(ctx context.Context, pool *pgtx.Pool) error {
			b := &pgx.Batch{}
			b.Queue("select 1")
			b.Queue(sleep)
			br := pool.SendBatch(ctx, b)
			_, err := br.Exec()
			if err == nil {
				_, err = br.Exec()
			}
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			return err
		}},
		{name: "CopyFrom", run: func(ctx context.Context, pool *pgtx.Pool) error {
			// COPY fires the sink's trigger, which sleeps on the server.
			_, err := pool.CopyFrom(ctx, pgx.Identifier{"guard_sink"}, []string{"v"}, pgx.CopyFromRows([][]any{{1}, {2}}))
			return err
		}},
	}
	ctx := testCtx(t)
	pool := newPool(t, pgtxtest.NewDatabase(t), func(c *pgtx.Config) { c.MaxConns = 1 })
	guardExec(t, ctx, pool,
		"create table guard_sink (v int)",
		`create function guard_slow() returns trigger language plpgsql as $$ begin perform pg_sleep(10); return new; end $$`,
		"create trigger guard_slow before insert on guard_sink for each row execute function guard_slow()")
	backend := func(t *testing.T) uint32 {
		t.Helper()
		var pid uint32
		if err := pool.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatalf("the connection after the cancel: %v", err)
		}
		return pid
	}
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	pid0 := backend(t)
	conns0 := pool.Stats().Pool.NewConnsCount()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			signalled := pool.Stats().Cancels.SignalledCount
			callCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := tc.run(callCtx, pool)
			elapsed := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want it to match context.DeadlineExceeded", err)
			}
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != guardQueryCanceled {
				t.Fatalf("err = %v: want the server's 57014 reachable with errors.As", err)
			}
			if !strings.Contains(pgErr.Message, "user request") {
				t.Errorf("the server said %q, want the client's cancel (\"due to user request\")", pgErr.Message)
			}
			if elapsed >= 3*time.Second {
				t.Errorf("the call returned after %v, want soon after its 300ms deadline", elapsed)
			}
			if d := pool.Stats().Cancels.SignalledCount - signalled; d != 1 {
				t.Errorf("Cancels.SignalledCount rose by %d, want 1 (a server-side cancel)", d)
			}
			if pid := backend(t); pid != pid0 {
				t.Errorf("the next query ran on backend %d, want the same connection (backend %d)", pid, pid0)
			}
			if n := pool.Stats().Pool.NewConnsCount(); n != conns0 {
				t.Errorf("NewConnsCount %d, want %d: the cancelled connection must be reused", n, conns0)
			}
		})
	}

	// Ping has no statement of its own to sleep: the server answers it at
	// once. Its context ends while it waits for the pool's only connection,
	// which a transaction holds in pg_sleep; the error matches
	// DeadlineExceeded. Then the holder's own sleep is cancelled on the
	// server, and the connection is still the same one.
	t.Run("Ping", func(t *testing.T) {
		signalled := pool.Stats().Cancels.SignalledCount
		holdCtx, release := context.WithCancel(ctx)
		defer release()
		holding := make(chan struct{})
		held := make(chan error, 1)
		go func() {
			held <- pgtx.Transaction(holdCtx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				close(holding)
				_, err := tx.Exec(ctx, sleep)
				return err
			})
		}()
		select {
		case <-holding:
		case err := <-held:
			t.Fatalf("the holding transaction ended early: %v", err)
		}
		pingCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := pool.Ping(pingCtx)
		elapsed := time.Since(start)
		release()
		holdErr := <-held
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Ping: err = %v, want it to match context.DeadlineExceeded", err)
		}
		if elapsed >= 3*time.Second {
			t.Errorf("Ping returned after %v, want soon after its 300ms deadline", elapsed)
		}
		if !errors.Is(holdErr, context.Canceled) || guardPgCode(holdErr) != guardQueryCanceled {
			t.Errorf("the holding transaction: err = %v, want context.Canceled with the server's 57014", holdErr)
		}
		if d := pool.Stats().Cancels.SignalledCount - signalled; d != 1 {
			t.Errorf("Cancels.SignalledCount rose by %d, want 1 (the holder's sleep)", d)
		}
		if pid := backend(t); pid != pid0 {
			t.Errorf("the next query ran on backend %d, want the same connection (backend %d)", pid, pid0)
		}
		if n := pool.Stats().Pool.NewConnsCount(); n != conns0 {
			t.Errorf("NewConnsCount %d, want %d", n, conns0)
		}
	})
}
