package integration

import (
	"context"
	"errors"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// crashKinds are the two ways a PostgreSQL server loses what its WAL did not
// keep while it goes on under the same system identifier and timeline:
// the postmaster itself stops at once and is started again (a new
// pg_postmaster_start_time), or one backend dies of a signal and the
// postmaster reinitialises shared memory and runs crash recovery in place
// (pg_postmaster_start_time does not change).
var crashKinds = []struct {
	name  string
	crash func(t *testing.T, ctx context.Context, srv *server.Server, dsn string) error
}{
	{"immediate stop and start", func(t *testing.T, ctx context.Context, srv *server.Server, _ string) error {
		if err := srv.Crash(ctx); err != nil {
			return err
		}
		return srv.Start(ctx)
	}},
	{"backend killed, reinitialised in place", func(t *testing.T, ctx context.Context, _ *server.Server, dsn string) error {
		victim, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		var pid int
		if err := victim.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
			return err
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return err
		}
		_ = victim.Close(ctx)
		return waitAccepting(ctx, dsn)
	}},
}

// TestResolveCrashReusedID: COMMIT is in flight (a deferred trigger holds it)
// for a transaction whose id has no WAL (an unlogged write), and the server
// crashes. Crash recovery sets the next id at or below it, so transactions
// on another connection are given the same id and commit. Only then does
// the resolver reach the server: pg_xact_status says "committed", about
// somebody else's transaction. pgtx must not believe it: the server started
// over since the transaction began, and its end-of-recovery checkpoint
// proves the id was not in the history it kept, so the transaction is run
// again and applies once. The pool's role is a plain one: the proof needs no
// privilege.
func TestResolveCrashReusedID(t *testing.T) {
	if testing.Short() {
		t.Skip("crashes a server of its own")
	}
	for _, kind := range crashKinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx := testCtx(t)
			// Commits are flushed when acknowledged (the harness turns that
			// off for speed), so the setup survives the crash.
			srv, dsn := syncCommitServer(t)
			role, roleDSN := heldCommitSchema(t, ctx, dsn)
			proxy, through := proxyTo(t, srv.Addr(), roleDSN)
			pool := newPool(t, through, func(c *pgtx.Config) {
				c.MaxConns = 2
				c.ResolveTimeout = 40 * time.Second // the crash, the recovery and the reuse come first
			})

			call := runHeldCommit(ctx, pool)
			first := call.waitFirst(t)
			admin := directConn(t, dsn)
			if err := waitInCommit(ctx, admin, first.pid); err != nil {
				t.Fatal(err)
			}
			// The resolver must not reach the server until its id is taken.
			proxy.RefuseNew(true)
			if err := kind.crash(t, ctx, srv, dsn); err != nil {
				t.Fatalf("crash: %v", err)
			}
			reused := reuseID(t, ctx, dsn, first.xid)
			t.Logf("role %s: the transaction had id %d; after the crash the server gave ids from %d, and %d is now %q",
				role, first.xid, reused.from, first.xid, reused.status)
			proxy.RefuseNew(false)

			call.wantRunAgain(t, ctx, pool, dsn)
		})
	}
}

// heldCommitSchema creates, on dsn's database, the unlogged table ledger
// with a deferred trigger that holds COMMIT for a minute when the
// transaction set test.hold, and a plain role that may use it; it returns
// the role and its DSN.
func heldCommitSchema(t *testing.T, ctx context.Context, dsn string) (string, string) {
	t.Helper()
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create unlogged table ledger (id text primary key)")
	mustExec(t, ctx, admin, `create function hold_commit() returns trigger language plpgsql as $$
		begin
			if current_setting('test.hold', true) = 'on' then perform pg_sleep(60); end if;
			return null;
		end $$`)
	mustExec(t, ctx, admin, `create constraint trigger hold after insert on ledger deferrable initially deferred
		for each row execute function hold_commit()`)
	role, roleDSN := testRole(t, ctx, admin, dsn, "resolver", "")
	mustExec(t, ctx, admin, "grant all on ledger to "+role)
	return role, roleDSN
}

// heldFirst is what the first attempt of a held call reports: its
// transaction id and its backend's pid.
type heldFirst struct {
	xid int64
	pid uint32
}

// heldResult is how a held call ended.
type heldResult struct {
	err  error
	runs int64
}

// heldCall is a Transaction running in the background whose first attempt
// inserts row 'a' into ledger with its COMMIT held by the trigger.
type heldCall struct {
	first chan heldFirst
	done  chan heldResult
}

// waitFirst returns what the first attempt reported, or fails the test if
// the call ended first.
func (c heldCall) waitFirst(t *testing.T) heldFirst {
	t.Helper()
	select {
	case f := <-c.first:
		return f
	case res := <-c.done:
		t.Fatalf("the call ended before its COMMIT was held: err = %v, fn ran %d times", res.err, res.runs)
	case <-time.After(30 * time.Second):
		t.Fatal("the call's first attempt never reached its insert")
	}
	return heldFirst{}
}

// wantRunAgain waits for the call to end and checks that its transaction,
// whose id was lost with the server's run, ran again: success, fn twice, the
// row once in the database at dsn, and the resolution counted as lost. A
// success without the row is the failure this package exists to catch: an
// answer about another transaction given the same id.
func (c heldCall) wantRunAgain(t *testing.T, ctx context.Context, pool *pgtx.Pool, dsn string) {
	t.Helper()
	res := <-c.done
	rows := queryInt(t, ctx, directConn(t, dsn), "select count(*) from ledger where id = 'a'")
	if res.err == nil && rows != 1 {
		t.Fatalf("the call reported committed, but its row is not in the database (rows %d, fn ran %d times): "+
			"the answer was about another transaction given the same id", rows, res.runs)
	}
	if res.err != nil || rows != 1 || res.runs != 2 {
		t.Errorf("err = %v, rows %d, fn ran %d times; want the call run again: success, the row once, fn twice", res.err, rows, res.runs)
	}
	if r := pool.Stats().Resolved; r.AbortedCount != 1 || r.LostCount != 1 || r.CommittedCount != 0 || r.UnknownCount != 0 {
		t.Errorf("resolutions %+v, want one aborted, lost with the server's run", r)
	}
}

// holdCommit starts runHeldCommit on pool and returns once its first COMMIT
// waits on the server of dsn.
func holdCommit(t *testing.T, ctx context.Context, pool *pgtx.Pool, dsn string) (heldCall, heldFirst) {
	t.Helper()
	call := runHeldCommit(ctx, pool)
	first := call.waitFirst(t)
	if err := waitInCommit(ctx, directConn(t, dsn), first.pid); err != nil {
		t.Fatal(err)
	}
	return call, first
}

// runHeldCommit starts a call whose first attempt holds its COMMIT (see
// heldCommitSchema).
func runHeldCommit(ctx context.Context, pool *pgtx.Pool) heldCall {
	c := heldCall{first: make(chan heldFirst, 1), done: make(chan heldResult, 1)}
	go func() {
		var runs counter
		err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			n := runs.inc()
			var first heldFirst
			// The backend's own pid: behind a pooler the connection's is not.
			if err := tx.QueryRow(ctx, "select pg_current_xact_id()::text::int8, pg_backend_pid()").Scan(&first.xid, &first.pid); err != nil {
				return err
			}
			if n == 1 {
				if _, err := tx.Exec(ctx, "set local test.hold = on"); err != nil {
					return err
				}
				c.first <- first
			}
			_, err := tx.Exec(ctx, "insert into ledger values ('a')")
			return err
		})
		c.done <- heldResult{err: err, runs: runs.get()}
	}()
	return c
}

// reused is what reuseID saw.
type reused struct {
	from   int64  // the first id the server gave after the crash
	status string // pg_xact_status of the reused id
}

// reuseID commits transactions on a connection of its own until the server
// has given xid again, and fails the test if the crash kept it (the scenario
// did not happen).
func reuseID(t *testing.T, ctx context.Context, dsn string, xid int64) reused {
	t.Helper()
	conn := directConn(t, dsn)
	var r reused
	for i := 0; ; i++ {
		var id int64
		if err := conn.QueryRow(ctx, "select pg_current_xact_id()::text::int8").Scan(&id); err != nil {
			t.Fatalf("take an id: %v", err)
		}
		if i == 0 {
			r.from = id
			if id > xid {
				t.Fatalf("the first id after the crash is %d, past the transaction's %d: the WAL kept it, nothing is reused", id, xid)
			}
		}
		if id >= xid {
			break
		}
	}
	if err := conn.QueryRow(ctx, "select pg_xact_status($1::text::xid8)", strconv.FormatInt(xid, 10)).Scan(&r.status); err != nil {
		t.Fatal(err)
	}
	return r
}

// waitAccepting waits (bounded by ctx and 30s) until the server at dsn
// accepts connections and runs a query.
func waitAccepting(ctx context.Context, dsn string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := pgx.Connect(ctx, dsn)
		if err == nil {
			_, err = c.Exec(ctx, "select 1")
			_ = c.Close(ctx)
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.Join(errors.New("the server did not accept connections again"), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestResolveNeverEndsAnotherTransactionsBackend: after a crash restart the
// transaction's id is given to another transaction, which stays open (idle
// in its transaction) while the resolver asks. Within one run a backend
// running the id is the transaction's own, and resolution may end it; after
// the restart it is a stranger's: it must live, and the call, whose id is
// provably lost, runs again.
func TestResolveNeverEndsAnotherTransactionsBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("crashes a server of its own")
	}
	ctx := testCtx(t)
	srv, dsn := syncCommitServer(t)
	_, roleDSN := heldCommitSchema(t, ctx, dsn)
	proxy, through := proxyTo(t, srv.Addr(), roleDSN)
	pool := newPool(t, through, func(c *pgtx.Config) {
		c.MaxConns = 2
		c.ResolveTimeout = 40 * time.Second
	})
	call, first := holdCommit(t, ctx, pool, dsn)
	proxy.RefuseNew(true)
	if err := srv.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The stranger: transactions until the next one is given the id, and
	// that one is left open.
	stranger := directConn(t, dsn)
	for {
		// The next id, without taking it (nothing else runs).
		var next int64
		if err := stranger.QueryRow(ctx, "select pg_snapshot_xmax(pg_current_snapshot())::text::int8").Scan(&next); err != nil {
			t.Fatal(err)
		}
		if next == first.xid {
			break
		}
		if next > first.xid {
			t.Fatalf("the next id after the crash is %d, past the transaction's %d: nothing is reused", next, first.xid)
		}
		mustExec(t, ctx, stranger, "select pg_current_xact_id()")
	}
	var id int64
	tx, err := stranger.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, "select pg_current_xact_id()::text::int8").Scan(&id); err != nil || id != first.xid {
		t.Fatalf("the stranger's id is %d (%v), want %d", id, err, first.xid)
	}
	proxy.RefuseNew(false)

	res := <-call.done
	if res.err != nil || res.runs != 2 {
		t.Errorf("err = %v, fn ran %d times; want the lost transaction run again", res.err, res.runs)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Errorf("the stranger's transaction, holding the id, was ended: %v", err)
	}
	if r := pool.Stats().Resolved; r.TerminatedCount != 0 || r.LostCount != 1 {
		t.Errorf("resolutions %+v, want none ended, one lost", r)
	}
}
