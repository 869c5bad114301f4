package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// proxied returns a fresh database, a fault proxy in front of the server and
// the proxied DSN.
func proxied(t *testing.T) (direct string, proxy *faultproxy.Proxy, through string) {
	t.Helper()
	direct = newDB(t)
	proxy, through = proxyTo(t, server.Shared(t).Addr(), direct)
	return direct, proxy, through
}

// proxyTo starts a fault proxy in front of the server at addr and returns it
// and the DSN of dsn's database through it.
func proxyTo(t *testing.T, addr, dsn string) (*faultproxy.Proxy, string) {
	t.Helper()
	proxy := faultproxy.New(t, addr)
	through, err := proxy.DSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return proxy, through
}

// cancelPoolPast gives the cancel pool the direct DSN, past the proxy: it
// connects, and warms its connection up, in the background, so a test
// that counts what the proxy sees counts only the transactions'
// connection.
func cancelPoolPast(direct string) func(*pgtx.Config) {
	return func(c *pgtx.Config) { c.CancelConnString = direct }
}

// TestCommitCutIsCommitUnknown: the proxy forwards COMMIT to the server and
// cuts the connection before the answer comes back. With resolution off the
// outcome is unknown: the error matches ErrCommitUnknown and wraps the
// network error, fn ran once, and the row is present at most once.
func TestCommitCutIsCommitUnknown(t *testing.T) {
	ctx := testCtx(t)
	direct, proxy, through := proxied(t)
	admin := directConn(t, direct)
	mustExec(t, ctx, admin, "create table ledger (transfer_id text primary key)")
	pool := newPool(t, through, func(c *pgtx.Config) { c.ResolveTimeout = -1 })

	proxy.CutOnCommit(1)
	var attempts counter
	err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		attempts.inc()
		_, err := tx.Exec(ctx, "insert into ledger values ('t-1')")
		return err
	})
	if cuts := proxy.Stats().CutsAfterForward; cuts != 1 {
		t.Fatalf("the proxy cut %d connections at COMMIT, want 1", cuts)
	}
	if !errors.Is(err, pgtx.ErrCommitUnknown) {
		t.Fatalf("err = %v, want ErrCommitUnknown", err)
	}
	if errors.Unwrap(err) == nil || pgtx.Classify(err) != pgtx.ClassAmbiguous {
		t.Errorf("err = %v must wrap the original error and classify as ambiguous", err)
	}
	if pgtx.Classify(err).Retryable() {
		t.Errorf("an ambiguous commit must not be retryable")
	}
	if attempts.get() != 1 {
		t.Errorf("fn ran %d times, want 1: never run fn again after an ambiguous COMMIT", attempts.get())
	}
	if n := queryInt(t, ctx, admin, "select count(*) from ledger where transfer_id = 't-1'"); n > 1 {
		t.Errorf("row present %d times", n)
	}
	// The pool serves normally afterwards.
	if err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "insert into ledger values ('t-2')")
		return err
	}); err != nil {
		t.Fatalf("after the cut: %v", err)
	}
}

// TestConnectionCutMidFnRetried: the proxy cuts the connection instead of
// forwarding a statement inside fn. Nothing was committed, so pgtx runs the
// whole transaction again on a fresh connection, and it applies once.
func TestConnectionCutMidFnRetried(t *testing.T) {
	ctx := testCtx(t)
	direct, proxy, through := proxied(t)
	admin := directConn(t, direct)
	mustExec(t, ctx, admin, "create table ledger (transfer_id text primary key)")
	mustExec(t, ctx, admin, "create table accounts (id int primary key, balance int not null)")
	mustExec(t, ctx, admin, "insert into accounts values (1, 100), (2, 100)")
	pool := newPool(t, through, nil)

	tests := []struct {
		name string
		arm  func()
	}{
		{"cut before the statement reaches the server", func() {
			proxy.CutBeforeForward(faultproxy.MatchPrefix("update accounts set balance = balance + 10"), 1)
		}},
		{"cut after the statement reached the server", func() { proxy.CutAfterForward(faultproxy.MatchPrefix("update accounts set balance = balance + 10"), 1) }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := proxy.Stats()
			tt.arm()
			id := "mid-" + string(rune('a'+i))
			var attempts counter
			err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
				attempts.inc()
				if _, err := tx.Exec(ctx, "insert into ledger values ($1)", id); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, "update accounts set balance = balance - 10 where id = 1"); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "update accounts set balance = balance + 10 where id = 2")
				return err
			})
			if err != nil {
				t.Fatalf("err = %v: a connection lost before COMMIT must be retried", err)
			}
			after := proxy.Stats()
			if cuts := after.CutsBeforeForward + after.CutsAfterForward - before.CutsBeforeForward - before.CutsAfterForward; cuts != 1 {
				t.Fatalf("the proxy cut %d connections, want 1", cuts)
			}
			if attempts.get() != 2 {
				t.Errorf("fn ran %d times, want 2", attempts.get())
			}
			if n := queryInt(t, ctx, admin, "select count(*) from ledger where transfer_id = $1", id); n != 1 {
				t.Errorf("transfer applied %d times, want exactly once", n)
			}
		})
	}
	if sum := queryInt(t, ctx, admin, "select sum(balance) from accounts"); sum != 200 {
		t.Errorf("total balance = %d, want 200", sum)
	}
	if b := queryInt(t, ctx, admin, "select balance from accounts where id = 2"); b != 120 {
		t.Errorf("balance of 2 = %d, want 120 (two transfers, each applied once)", b)
	}
}

// TestNoMoreRoundTripsThanBeginTxFunc counts the messages that reach the
// server through the proxy: pgtx, with a per-call statement timeout, sends
// exactly as many queries as pgx.BeginTxFunc for the same work (BEGIN and SET
// LOCAL ride in one simple-protocol query). The connection is made and set
// up first, by a transaction that sends nothing: a connection's first
// transaction asks, once, what resolving its COMMITs needs.
func TestNoMoreRoundTripsThanBeginTxFunc(t *testing.T) {
	ctx := testCtx(t)
	direct, proxy, through := proxied(t)
	pool := newPool(t, through, cancelPoolPast(direct))
	if err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(context.Context, pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	work := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "select 1")
		return err
	}
	count := func(run func() error) int64 {
		t.Helper()
		before := proxy.Stats().Statements
		if err := run(); err != nil {
			t.Fatal(err)
		}
		return proxy.Stats().Statements - before
	}
	baseline := count(func() error {
		return pgx.BeginTxFunc(ctx, pool.Pgxpool(), pgx.TxOptions{IsoLevel: pgx.Serializable}, func(tx pgx.Tx) error { return work(ctx, tx) })
	})
	plain := count(func() error { return pgtx.Transaction(ctx, pool, pgtx.Serializable, work) })
	withTimeout := count(func() error {
		return pgtx.TransactionWithOptions(ctx, pool, pgtx.Serializable, pgtx.Options{StatementTimeout: 1500 * time.Millisecond}, work)
	})
	if baseline == 0 || plain > baseline || withTimeout > baseline {
		t.Errorf("statements sent: pgx.BeginTxFunc %d, pgtx %d, pgtx with per-call timeout %d; pgtx must not send more", baseline, plain, withTimeout)
	}
}
