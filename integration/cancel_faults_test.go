package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// warmCancel cancels one statement so the cancel path (its pool connection)
// is established before a fault is put on it.
func warmCancel(t *testing.T, ctx context.Context, pool *pgtx.Pool) {
	t.Helper()
	// The connection is made first: a connect that outlasts the 50ms would
	// end the statement before it was sent, and nothing would be cancelled.
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := pool.Exec(cctx, "select pg_sleep(10)"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("warm-up cancel: %v", err)
	}
}

// slowCancelPath opens a pool on a fresh database whose cancel pool alone
// goes through a fault proxy, with mutate applied to its Config, and cancels
// one statement so the cancel pool's connection is made before a fault is
// put on the proxy.
func slowCancelPath(t *testing.T, ctx context.Context, mutate func(*pgtx.Config)) (*pgtx.Pool, *faultproxy.Proxy) {
	t.Helper()
	direct := newDB(t)
	cancelProxy := faultproxy.New(t, server.Shared(t).Addr())
	cancelDSN, err := cancelProxy.DSN(direct)
	if err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, direct, func(c *pgtx.Config) {
		c.CancelConnString = cancelDSN
		mutate(c)
	})
	warmCancel(t, ctx, pool)
	return pool, cancelProxy
}

// TestUnconfirmedPoolCancelNeverReused: the pg_cancel_backend query of
// CancelModePool is written, but its answer does not come back within the
// grace (2s of latency on the cancel pool's route only, a 1s grace); the
// cancelled statement meanwhile ends by itself. The connection must not be
// reused: the signal that arrives later would cancel the next borrower's
// statement. The statement waits for a row lock the test holds: the
// context ends once it waits, and the lock is released once the cancel is
// sent, so it ends by itself whatever the machine's load.
func TestUnconfirmedPoolCancelNeverReused(t *testing.T) {
	ctx := testCtx(t)
	pool, cancelProxy := slowCancelPath(t, ctx, func(c *pgtx.Config) {
		c.MaxConns = 1
		c.CancelGrace = time.Second
	})
	dsn := pool.Config().ConnString()
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table hot (id int primary key, n int not null)")
	mustExec(t, ctx, admin, "insert into hot values (1, 0)")
	holder, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, holder.Conn(), "select * from hot where id = 1 for update")
	before := pool.Stats()
	cancelProxy.SetLatency(2 * time.Second)

	const stmt = "update hot set n = n + 1 where id = 1"
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	released := make(chan error, 1)
	go func() {
		if err := cancelWhenActive(ctx, dsn, stmt, cancel); err != nil {
			released <- err
			return
		}
		for pool.Stats().Cancels.SentCount == before.Cancels.SentCount {
			select {
			case <-ctx.Done():
				released <- ctx.Err()
				return
			case <-time.After(time.Millisecond):
			}
		}
		released <- holder.Commit(ctx)
	}()
	_, _ = pool.Exec(cctx, stmt) // ends by itself, the lock released, within the grace
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	assertNextBorrowerUntouched(t, ctx, pool, before)
}

// cancelWhenActive calls cancel once another backend of the database dsn
// names runs sql (alone or in a string of statements); it returns an
// error if none does before ctx ends.
func cancelWhenActive(ctx context.Context, dsn, sql string, cancel context.CancelFunc) error {
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		var n int
		err := conn.QueryRow(ctx, "select count(*) from pg_stat_activity where strpos(query, $1) > 0 and state = 'active' and datname = current_database() and pid <> pg_backend_pid()", sql).Scan(&n)
		if err != nil {
			return fmt.Errorf("waiting for %q to run: %w", sql, err)
		}
		if n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%q never ran: %w", sql, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// assertNextBorrowerUntouched runs the next borrower's 2s statement, long
// enough for a late cancel to land in it, and checks that it was not
// cancelled and that the connection of the unconfirmed cancel was destroyed
// and counted as closed.
func assertNextBorrowerUntouched(t *testing.T, ctx context.Context, pool *pgtx.Pool, before pgtx.Stats) {
	t.Helper()
	start := time.Now()
	_, err := pool.Exec(ctx, "select pg_sleep(2)")
	if sqlState(err) == pgerrcode.QueryCanceled {
		t.Fatalf("the next borrower's statement got 57014 after %v: a late cancel hit it", time.Since(start).Round(time.Millisecond))
	}
	if err != nil {
		t.Fatalf("next borrower: %v", err)
	}
	s := pool.Stats()
	if got := s.Cancels.ClosedCount - before.Cancels.ClosedCount; got != 1 {
		t.Errorf("Cancels.ClosedCount grew by %d, want 1 (the connection of the unconfirmed cancel)", got)
	}
	if got := s.Pool.NewConnsCount() - before.Pool.NewConnsCount(); got != 1 {
		t.Errorf("new connections: %d, want 1: the connection must be replaced, not reused", got)
	}
}

// TestCancelPoolBusyIsNotUnhealthy: a storm of simultaneous cancels on a
// slow cancel pool (of its fixed two connections). Cancels that find the cancel pool busy
// fall back to the protocol cancel; that does not mark the cancel pool
// unhealthy, so the next cancel goes through it again.
func TestCancelPoolBusyIsNotUnhealthy(t *testing.T) {
	ctx := testCtx(t)
	const storm = 8
	pool, cancelProxy := slowCancelPath(t, ctx, func(c *pgtx.Config) {
		c.MaxConns = storm
		c.CancelGrace = time.Second
	})
	cancelProxy.SetLatency(200 * time.Millisecond)

	deadline := time.Now().Add(100 * time.Millisecond)
	var wg sync.WaitGroup
	for range storm {
		wg.Go(func() {
			cctx, cancel := context.WithDeadline(ctx, deadline)
			defer cancel()
			_, _ = pool.Exec(cctx, "select pg_sleep(10)")
		})
	}
	wg.Wait()
	mid := pool.Stats()
	warmCancel(t, ctx, pool)
	after := pool.Stats()
	t.Logf("storm of %d cancels: %+v", storm, mid.Cancels)
	if after.Cancels.SignalledCount != mid.Cancels.SignalledCount+1 {
		t.Errorf("the cancel after the storm was not signalled through the cancel pool (protocol %d -> %d): a busy pool was taken for an unhealthy one",
			mid.Cancels.ProtocolCount, after.Cancels.ProtocolCount)
	}
}

// testRole creates a login role with a unique name for the test, gives it
// what the statements of the test need, and drops it in cleanup. It returns
// the role's name and dsn with the user replaced by it.
func testRole(t *testing.T, ctx context.Context, admin *pgx.Conn, dsn, prefix, grants string) (string, string) {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := prefix + "_" + hex.EncodeToString(b)
	// A password, for servers that ask for one (a Docker or env server); a
	// local one trusts every role.
	password := "pw_" + hex.EncodeToString(b)
	mustExec(t, ctx, admin, "create role "+name+" login password '"+password+"' "+grants)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "drop owned by "+name)
		_, _ = c.Exec(context.Background(), "drop role "+name)
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(name, password)
	return name, u.String()
}

// lockHolder runs, on pool, a transaction that locks row 1 of table hot and
// then sleeps on the server until its 300ms deadline; a second session
// waiting for the row measures when the lock is released. It returns the
// times from the deadline to the call's return and to the release, and the
// call's error.
func lockHolder(t *testing.T, ctx context.Context, pool *pgtx.Pool, waiter *pgx.Conn) (toReturn, toRelease time.Duration, err error) {
	t.Helper()
	locked, noLock := make(chan struct{}), make(chan struct{})
	released := make(chan time.Time, 1)
	go func() {
		select {
		case <-locked:
		case <-noLock:
			released <- time.Time{}
			return
		}
		// The server's clock (the same machine's) says when the row was
		// free: the waiter's own round trip, slow on a loaded machine, is
		// not the lock holder's.
		var at time.Time
		if err := waiter.QueryRow(ctx, "update hot set n = n + 1 where id = 1 returning clock_timestamp()").Scan(&at); err != nil {
			t.Errorf("waiter: %v", err)
			at = time.Now()
		}
		released <- at
	}()
	// The pool's connection is made first, outside the 300ms: behind
	// PgBouncer in session mode a new server connection has taken 300ms
	// to be opened (PgBouncer's log: the login, then the server
	// connection 0.3s later), which is not what is measured here.
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	deadline, _ := cctx.Deadline()
	err = pgtx.Transaction(cctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "select * from hot where id = 1 for update"); err != nil {
			return err
		}
		close(locked)
		_, err := tx.Exec(ctx, "select pg_sleep(30)")
		return err
	})
	toReturn = time.Since(deadline)
	select {
	case <-locked:
	default:
		close(noLock)
		<-released
		t.Fatalf("the row was never locked: %v", err)
	}
	return toReturn, (<-released).Sub(deadline), err
}

// TestCancelRoleOnlyInPgSignalBackend: the cancel pool's role is a member of
// pg_signal_backend but may not read other roles' pg_stat_activity rows
// (backend_start is NULL there). The cancel must still stop the statement
// at once (falling back to the protocol cancel), not wait out the grace.
func TestCancelRoleOnlyInPgSignalBackend(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	app, appDSN := testRole(t, ctx, admin, dsn, "app", "")
	_, cancelDSN := testRole(t, ctx, admin, dsn, "canceller", "in role pg_signal_backend")
	mustExec(t, ctx, admin, "create table hot (id int primary key, n int not null)")
	mustExec(t, ctx, admin, "insert into hot values (1, 0)")
	mustExec(t, ctx, admin, "grant select, update on hot to "+app)

	pool := newPool(t, appDSN, func(c *pgtx.Config) { c.MaxConns = 1; c.CancelConnString = cancelDSN })
	_, toRelease, err := lockHolder(t, ctx, pool, directConn(t, dsn))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	s := pool.Stats()
	t.Logf("deadline -> lock released %v; cancels %+v", toRelease.Round(time.Millisecond), s.Cancels)
	if toRelease > 200*time.Millisecond {
		t.Errorf("lock released %v after the deadline, want within 200ms", toRelease.Round(time.Millisecond))
	}
	if s.Pool.NewConnsCount() != 1 {
		t.Errorf("new connections = %d, want 1: the cancel keeps the connection", s.Pool.NewConnsCount())
	}
}

// TestUnconfirmedProtocolCancelNeverReused: CancelModeProtocol with 1.5s of
// latency on the cancel request's route only. pgx's CancelRequest gives up
// waiting for the server's acknowledgement at the grace and returns nil;
// the request is still on its way and must not be taken as finished.
func TestUnconfirmedProtocolCancelNeverReused(t *testing.T) {
	ctx := testCtx(t)
	_, proxy, through := proxied(t)
	pool := newPool(t, through, func(c *pgtx.Config) {
		c.MaxConns = 1
		c.CancelMode = pgtx.CancelModeProtocol
		c.CancelGrace = 500 * time.Millisecond
	})
	warmCancel(t, ctx, pool)
	before := pool.Stats()
	proxy.SetConnLatency(faultproxy.ConnCancelRequest, 1500*time.Millisecond)

	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, _ = pool.Exec(cctx, "select pg_sleep(0.3)") // ends by itself before the grace
	cancel()
	assertNextBorrowerUntouched(t, ctx, pool, before)
}

// TestUserAcquireHooksKept: pgtx installs a PrepareConn of its own (to keep
// doomed connections from being handed out); the caller's PrepareConn, or
// its deprecated BeforeAcquire, still runs on every acquire.
func TestUserAcquireHooksKept(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	tests := []struct {
		name string
		set  func(c *pgtx.Config, calls *counter)
	}{
		{"PrepareConn", func(c *pgtx.Config, calls *counter) {
			c.PrepareConn = func(context.Context, *pgx.Conn) (bool, error) { calls.inc(); return true, nil }
		}},
		{"BeforeAcquire", func(c *pgtx.Config, calls *counter) {
			//lint:ignore SA1019 the deprecated hook is what is under test
			c.BeforeAcquire = func(context.Context, *pgx.Conn) bool { calls.inc(); return true }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls counter
			pool := newPool(t, dsn, func(c *pgtx.Config) { tt.set(c, &calls) })
			for range 3 {
				if _, err := pool.Exec(ctx, "select 1"); err != nil {
					t.Fatal(err)
				}
			}
			if calls.get() != 3 {
				t.Errorf("the caller's hook ran %d times for 3 acquires", calls.get())
			}
		})
	}
}
