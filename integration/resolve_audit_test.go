package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/bouncer"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// The ways, besides a crash restart in place (TestResolveCrashReusedID), in
// which the server a resolution asks may answer about another transaction
// than the one whose COMMIT was lost: a pooler whose server connection
// changed under the client's, a backup restored in the server's place, a
// standby reached by mistake, another system listed in the connection
// string. Each is built for real; the answer must be the transaction's, or
// ErrCommitUnknown, never another's.

// TestResolveCrashReusedIDBehindPgBouncer is TestResolveCrashReusedID
// through PgBouncer in transaction mode, where the client's connection
// outlives the server's and the connection's pid is PgBouncer's: the server's
// run is captured with each transaction. PgBouncer is paused while the
// server crashes, restarts and gives the id again, so the resolver's
// question waits in its queue and reaches the server only then.
func TestResolveCrashReusedIDBehindPgBouncer(t *testing.T) {
	if testing.Short() {
		t.Skip("crashes a server of its own")
	}
	ctx := testCtx(t)
	srv, dsn := syncCommitServer(t)
	_, roleDSN := heldCommitSchema(t, ctx, dsn)
	pgb := bouncer.New(t, srv, &bouncer.Config{
		QueryWaitTimeout: 50 * time.Second, ServerLoginRetry: 50 * time.Millisecond,
	})
	through, err := server.DSNWithAddr(roleDSN, pgb.Addr())
	if err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, through, func(c *pgtx.Config) {
		c.MaxConns = 2
		c.ResolveTimeout = 40 * time.Second
		bouncerSettings(c)
	})

	call, first := holdCommit(t, ctx, pool, dsn)
	db := dbName(t, dsn)
	paused := make(chan error, 1)
	go func() { paused <- pgb.Admin(ctx, "PAUSE "+db) }()
	waitBouncerPaused(t, ctx, pgb, db)
	if err := srv.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-paused; err != nil {
		t.Fatal(err)
	}
	reused := reuseID(t, ctx, dsn, first.xid)
	t.Logf("the transaction had id %d; after the crash the server gave ids from %d, and %d is now %q",
		first.xid, reused.from, first.xid, reused.status)
	if err := pgb.Admin(ctx, "RESUME "+db); err != nil {
		t.Fatal(err)
	}

	call.wantRunAgain(t, ctx, pool, dsn)
}

// waitBouncerPaused waits until PgBouncer's SHOW DATABASES says database db
// is paused.
func waitBouncerPaused(t *testing.T, ctx context.Context, b *bouncer.Bouncer, db string) {
	t.Helper()
	conn := directConn(t, b.AdminDSN())
	for deadline := time.Now().Add(10 * time.Second); ; {
		rows, err := conn.Query(ctx, "SHOW DATABASES", pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		paused := false
		for rows.Next() {
			row := map[string]any{}
			values, _ := rows.Values()
			for i, f := range rows.FieldDescriptions() {
				row[f.Name] = values[i]
			}
			paused = paused || (row["name"] == db && fmt.Sprint(row["paused"]) == "1")
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if paused {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("PgBouncer never paused database %s", db)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestResolveBehindPgBouncerCapturesEachTransactionsRun: behind PgBouncer
// the client's connection outlives the server's run. A connection made
// before a crash restart carries a transaction after it whose COMMIT is
// applied and whose answer is lost; the server's run is the one the
// transaction ran in, captured with it, so the server's "committed" is
// believed. Judged by the run seen when the connection was made, the
// restart would make the id look lost, and the call would run again: a
// double.
func TestResolveBehindPgBouncerCapturesEachTransactionsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("crashes a server of its own")
	}
	ctx := testCtx(t)
	srv, dsn := syncCommitServer(t)
	mustExec(t, ctx, directConn(t, dsn), "create table ledger (id text primary key)")
	pgb := bouncer.New(t, srv, &bouncer.Config{ServerLoginRetry: 50 * time.Millisecond})
	proxy := faultproxy.New(t, pgb.Addr())
	through, err := server.DSNWithAddr(dsn, proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, through, func(c *pgtx.Config) {
		bouncerSettings(c)
		c.MaxConns = 1
	})
	insert := func(id string, runs *counter) error {
		return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			runs.inc()
			if n := pool.Pgxpool().Stat().NewConnsCount(); n != 1 {
				return pgtx.NonRetryable(fmt.Errorf("the pool made %d connections: the one made before the restart must carry this transaction", n))
			}
			_, err := tx.Exec(ctx, "insert into ledger values ($1)", id)
			return err
		})
	}
	var before, after counter
	if err := insert("before", &before); err != nil {
		t.Fatal(err)
	}
	if err := srv.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// A login PgBouncer tried while the server was down makes it refuse
	// clients for server_login_retry, ending their sessions ("server login
	// has been failing"): the pool's connection must not meet that.
	bouncerServes(t, ctx, dsn, pgb.Addr())
	proxy.CutOnCommitReply(1)
	err = insert("after", &after)
	if proxy.Stats().CutsOnCommitReply != 1 {
		t.Fatalf("err = %v; the proxy did not cut at COMMIT's answer", err)
	}
	rows := queryInt(t, ctx, directConn(t, dsn), "select count(*) from ledger where id = 'after'")
	if err != nil || rows != 1 || after.get() != 1 {
		t.Errorf("err = %v, rows %d, fn ran %d times; want the applied COMMIT resolved as committed: success, one row, fn once",
			err, rows, after.get())
	}
	if r := pool.Stats().Resolved; r.CommittedCount != 1 {
		t.Errorf("resolutions %+v, want one committed", r)
	}
}

// TestResolveRestoredBackup: while COMMIT is held on the primary, the primary
// is lost and a copy of its data taken earlier (a streaming standby, stopped
// and started without its standby.signal: crash recovery from what it had,
// the same system and timeline) takes its place behind the second address
// of the connection string. The copy gives the transaction's id to another
// transaction of its own, which commits, before the resolver reaches it. The
// id is past the copy's end-of-recovery checkpoint: the transaction is not
// in the history the copy kept, so it runs again there.
func TestResolveRestoredBackup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	ctx := testCtx(t)
	primary, standby, dsn := syncCommitPair(t)
	_, roleDSN := heldCommitSchema(t, ctx, dsn)
	copyDSN, err := server.DSNWithAddr(dsn, standby.Addr())
	if err != nil {
		t.Fatal(err)
	}
	waitTable(t, ctx, copyDSN, "ledger")
	toPrimary := faultproxy.New(t, primary.Addr())
	toCopy := faultproxy.New(t, standby.Addr())
	toCopy.RefuseNew(true)
	pool := newPool(t, failoverDSN(t, roleDSN, toPrimary.Addr(), toCopy.Addr()), func(c *pgtx.Config) {
		c.MaxConns = 2
		c.ResolveTimeout = 40 * time.Second
	})

	call, first := holdCommit(t, ctx, pool, dsn)
	toPrimary.RefuseNew(true)
	if err := primary.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	// The copy: the standby's data, started as a server of its own.
	if err := standby.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(filepath.Dir(standby.LogPath()), "data", "standby.signal")); err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(ctx); err != nil {
		t.Fatal(err)
	}
	reused := reuseID(t, ctx, copyDSN, first.xid)
	t.Logf("the transaction had id %d; the restored copy gave ids from %d, and %d is now %q there",
		first.xid, reused.from, first.xid, reused.status)
	toCopy.RefuseNew(false)

	call.wantRunAgain(t, ctx, pool, copyDSN)
	if err := primary.Start(ctx); err != nil {
		t.Errorf("start the old primary again: %v", err)
	}
}

// waitTable waits until the table exists on the server at dsn (a standby
// replaying the primary's).
func waitTable(t *testing.T, ctx context.Context, dsn, table string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			var ok bool
			err = conn.QueryRow(ctx, "select to_regclass($1) is not null", table).Scan(&ok)
			_ = conn.Close(ctx)
			if err == nil && ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared on %s: %v", table, dsn, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestResolveNeverAsksAStandby: the connection string lists the primary and
// a standby without target_session_attrs, so once the primary is gone the
// resolver reaches the standby, whose answer may lag the primary's (it has
// not replayed a COMMIT the primary wrote). It must not be used: with the
// primary down for longer than ResolveTimeout the outcome is
// ErrCommitUnknown, saying there was no answer, never "aborted" and a rerun.
func TestResolveNeverAsksAStandby(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	ctx := testCtx(t)
	primary, standby, dsn := syncCommitPair(t)
	_, roleDSN := heldCommitSchema(t, ctx, dsn)
	standbyDSN, err := server.DSNWithAddr(dsn, standby.Addr())
	if err != nil {
		t.Fatal(err)
	}
	waitTable(t, ctx, standbyDSN, "ledger")
	both := strings.Replace(failoverDSN(t, roleDSN, primary.Addr(), standby.Addr()), "target_session_attrs=read-write", "target_session_attrs=any", 1)
	pool := newPool(t, both, func(c *pgtx.Config) {
		c.MaxConns = 2
		c.ResolveTimeout = 2 * time.Second
	})

	call, _ := holdCommit(t, ctx, pool, dsn)
	if err := primary.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-call.done
	r := pool.Stats().Resolved
	t.Logf("err = %v; resolutions %+v", res.err, r)
	if !errors.Is(res.err, pgtx.ErrCommitUnknown) || res.runs != 1 {
		t.Fatalf("err = %v, fn ran %d times; want ErrCommitUnknown, fn once: a standby's answer is never used", res.err, res.runs)
	}
	if r.UnansweredCount != 1 || r.AbortedCount != 0 || !strings.Contains(res.err.Error(), "a server that answered was in recovery") {
		t.Errorf("resolutions %+v, err %v; want one unanswered, the standby named as in recovery", r, res.err)
	}
	if err := primary.Start(ctx); err != nil {
		t.Errorf("start the primary again: %v", err)
	}
}

// TestResolveAnotherSystemListed: the connection string's second address is
// another system (a server initialised on its own, as after a pooler or a
// DNS name was pointed elsewhere). A server copied from the same data
// directory is the same system for PostgreSQL, and for pgtx a backup
// restored in the server's place (TestResolveRestoredBackup). The primary crashes while COMMIT is held,
// and the resolver reaches the other system, which may well have given the
// same id: its answer is never used (ErrCommitUnknown, elsewhere).
func TestResolveAnotherSystemListed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two servers of its own")
	}
	ctx := testCtx(t)
	primary := server.New(t, &server.Config{Settings: map[string]string{"synchronous_commit": "on"}})
	other := server.New(t, &server.Config{OwnSystem: true})
	dsn := pgtxtest.NewDatabase(t, pgtxtest.WithServer(primary))
	role, roleDSN := heldCommitSchema(t, ctx, dsn)
	// The same database, role and table on the other system.
	otherAdmin := directConn(t, other.DSN(""))
	mustExec(t, ctx, otherAdmin, "create database "+dbName(t, dsn))
	otherDSN, err := server.DSNWithAddr(dsn, other.Addr())
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, otherAdmin, "create role "+role+" login")
	mustExec(t, ctx, directConn(t, otherDSN), "create table ledger (id text primary key)")
	mustExec(t, ctx, directConn(t, otherDSN), "grant all on ledger to "+role)
	pool := newPool(t, failoverDSN(t, roleDSN, primary.Addr(), other.Addr()), func(c *pgtx.Config) {
		c.MaxConns = 2
		c.ResolveTimeout = 20 * time.Second
	})

	call, _ := holdCommit(t, ctx, pool, dsn)
	if err := primary.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-call.done
	r := pool.Stats().Resolved
	t.Logf("err = %v; resolutions %+v", res.err, r)
	if !errors.Is(res.err, pgtx.ErrCommitUnknown) || res.runs != 1 || r.ElsewhereCount != 1 {
		t.Fatalf("err = %v, fn ran %d times, resolutions %+v; want ErrCommitUnknown from another system, fn once", res.err, res.runs, r)
	}
	if !strings.Contains(res.err.Error(), "another system") {
		t.Errorf("err = %v: it must say the server asked was another system", res.err)
	}
	if err := primary.Start(ctx); err != nil {
		t.Errorf("start the primary again: %v", err)
	}
}

// bouncerServes waits until a new client of the PgBouncer at addr runs a
// statement on dsn's database.
func bouncerServes(t *testing.T, ctx context.Context, dsn, addr string) {
	t.Helper()
	through, err := server.DSNWithAddr(dsn, addr)
	if err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := pgx.Connect(ctx, through)
		if err == nil {
			_, err = conn.Exec(ctx, "select 1")
			conn.Close(ctx)
		}
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("PgBouncer at %s never served: %v", addr, err)
		case <-tick.C:
		}
	}
}
