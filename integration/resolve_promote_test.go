package integration

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/bouncer"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// promotion is a primary and its streaming standby, each behind a proxy,
// a ledger table and a plain role, and a pool of that role whose
// connection string names both (target_session_attrs=read-write): it
// reaches whichever takes writes. Its questions about a lost COMMIT go on
// connections of their own (CancelModeProtocol), so that a proxy that
// refuses new connections keeps them from a server.
type promotion struct {
	primary, standby *server.Server
	pproxy, sproxy   *faultproxy.Proxy
	admin            *pgx.Conn // the primary's superuser, on the test's database
	standbyDSN       string    // the standby's superuser, on the test's database
	pool             *pgtx.Pool
}

func startPromotion(t *testing.T, ctx context.Context) *promotion {
	t.Helper()
	p := &promotion{}
	p.primary = server.New(t, &server.Config{Settings: map[string]string{"synchronous_commit": "on"}})
	p.standby = server.NewStandby(t, p.primary)
	dsn := pgtxtest.NewDatabase(t, pgtxtest.WithServer(p.primary))
	p.admin = directConn(t, dsn)
	mustExec(t, ctx, p.admin, "create table ledger (id text primary key)")
	role, roleDSN := testRole(t, ctx, p.admin, dsn, "resolver", "")
	mustExec(t, ctx, p.admin, "grant all on ledger to "+role)
	var err error
	if p.standbyDSN, err = server.DSNWithAddr(dsn, p.standby.Addr()); err != nil {
		t.Fatal(err)
	}
	p.waitCaughtUp(t, ctx)
	p.pproxy = faultproxy.New(t, p.primary.Addr())
	p.sproxy = faultproxy.New(t, p.standby.Addr())
	p.pool = newPool(t, failoverDSN(t, roleDSN, p.pproxy.Addr(), p.sproxy.Addr()), func(c *pgtx.Config) {
		c.MaxConns = 2
		c.CancelMode = pgtx.CancelModeProtocol
		c.ConnConfig.ConnectTimeout = 2 * time.Second
		c.Retry.UnavailableTimeout = 60 * time.Second
	})
	t.Cleanup(func() {
		// The old primary comes back on its own timeline, for the cleanups
		// that drop the role and the database there.
		if err := p.primary.Start(context.Background()); err != nil {
			t.Errorf("start the old primary again: %v", err)
		}
	})
	return p
}

// waitCaughtUp waits until the standby has replayed everything the
// primary has flushed.
func (p *promotion) waitCaughtUp(t *testing.T, ctx context.Context) {
	t.Helper()
	var flushed string
	if err := p.admin.QueryRow(ctx, "select pg_current_wal_flush_lsn()::text").Scan(&flushed); err != nil {
		t.Fatal(err)
	}
	standby := directConn(t, p.standby.DSN("")) // the test's database may not be there yet
	for deadline := time.Now().Add(30 * time.Second); ; {
		var done bool
		if err := standby.QueryRow(ctx, "select pg_last_wal_replay_lsn() >= $1::text::pg_lsn", flushed).Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby never replayed up to %s", flushed)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// detach stops the standby's streaming: nothing the primary writes from
// now on reaches it.
func (p *promotion) detach(t *testing.T, ctx context.Context) {
	t.Helper()
	standby := directConn(t, p.standby.DSN(""))
	mustExec(t, ctx, standby, "alter system set primary_conninfo = ''")
	mustExec(t, ctx, standby, "select pg_reload_conf()")
	waitDetached(t, ctx, p.admin)
}

// trapCommit arms the primary's proxy: the next COMMIT is forwarded to the
// server, which runs it, and its connection is cut before the answer; from
// that moment on the proxy refuses new connections, so that no question
// reaches the old primary. The channel is closed when the trap fires.
func trapCommit(proxy *faultproxy.Proxy) <-chan struct{} {
	fired := make(chan struct{})
	var once sync.Once
	proxy.CutAfterForward(func(sql string) bool {
		if !faultproxy.IsCommit(sql) {
			return false
		}
		proxy.RefuseNew(true)
		once.Do(func() { close(fired) })
		return true
	}, 1)
	return fired
}

// failover stops the primary at once and promotes the standby.
func (p *promotion) failover(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := p.primary.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
}

// insertResult is how an insertCall ended.
type insertResult struct {
	err  error
	runs int64
}

// insertCall is a Transaction, running in the background, that inserts an
// id into the ledger; its first attempt reports its transaction id and the
// server's WAL insert position after its write.
type insertCall struct {
	first chan [2]int64
	done  chan insertResult
}

func startInsert(ctx context.Context, pool *pgtx.Pool, id string) insertCall {
	c := insertCall{first: make(chan [2]int64, 1), done: make(chan insertResult, 1)}
	go func() {
		var runs counter
		err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			n := runs.inc()
			if _, err := tx.Exec(ctx, "insert into ledger values ($1)", id); err != nil {
				return err
			}
			var xid, lsn int64
			if err := tx.QueryRow(ctx, "select pg_current_xact_id()::text::int8, (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8").Scan(&xid, &lsn); err != nil {
				return err
			}
			if n == 1 {
				c.first <- [2]int64{xid, lsn}
			}
			return nil
		})
		c.done <- insertResult{err: err, runs: runs.get()}
	}()
	return c
}

// waitRow waits until the server of conn has committed id into the ledger:
// the COMMIT the proxy forwarded has run.
func waitRow(t *testing.T, ctx context.Context, conn *pgx.Conn, id string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); queryInt(t, ctx, conn, "select count(*) from ledger where id = $1", id) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the COMMIT of %s never ran", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ledgerCount is how many times id is in the ledger of the server at dsn.
func ledgerCount(t *testing.T, ctx context.Context, dsn, id string) int {
	t.Helper()
	return queryInt(t, ctx, directConn(t, dsn), "select count(*) from ledger where id = $1", id)
}

// TestResolvePromotedCommitted: COMMIT runs on the primary and its answer
// is lost; the standby replays it; the primary is lost and the standby
// promoted before any question reaches a server (the new primary's latest
// checkpoint is soon on its new timeline). The promoted server's replay
// went past the transaction's record, so its "committed" is the
// transaction's: the call succeeds, fn ran once, the row is there once.
// Before the proof by the replay end, the outcome was ErrCommitUnknown
// (elsewhere).
func TestResolvePromotedCommitted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	ctx := testCtxFor(t, 2*time.Minute)
	p := startPromotion(t, ctx)
	fired := trapCommit(p.pproxy)
	call := startInsert(ctx, p.pool, "t-1")
	<-fired
	waitRow(t, ctx, p.admin, "t-1")
	p.waitCaughtUp(t, ctx)
	p.failover(t, ctx)
	mustExec(t, ctx, directConn(t, p.standbyDSN), "checkpoint") // as HA managers do
	res := <-call.done
	r := p.pool.Stats().Resolved
	t.Logf("err = %v, fn ran %d times; resolutions %+v", res.err, res.runs, r)
	if n := ledgerCount(t, ctx, p.standbyDSN, "t-1"); res.err != nil || res.runs != 1 || n != 1 {
		t.Errorf("err = %v, fn ran %d times, the row %d times on the new primary; want success, once, once", res.err, res.runs, n)
	}
	if r.CommittedCount != 1 || r.UnknownCount != 0 {
		t.Errorf("resolutions %+v, want one committed", r)
	}
}

// TestResolvePromotedLost: the standby is detached before the transaction
// writes, so its WAL never reaches it; COMMIT runs on the primary and its
// answer is lost; the primary is lost, the standby promoted, and the new
// primary gives the transaction's id again to a transaction of its own,
// which commits. Its "committed" is a stranger's: the promoted server's
// replay stopped short of the transaction's record, which proves the
// transaction is not in the new history. The call runs again on the new
// primary and the row is there once.
func TestResolvePromotedLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	ctx := testCtxFor(t, 2*time.Minute)
	p := startPromotion(t, ctx)
	p.detach(t, ctx)
	p.sproxy.RefuseNew(true) // no question reaches the new primary before the stranger
	fired := trapCommit(p.pproxy)
	call := startInsert(ctx, p.pool, "t-1")
	first := <-call.first
	<-fired
	waitRow(t, ctx, p.admin, "t-1")
	p.failover(t, ctx)
	if err := takeXid(ctx, p.standbyDSN, uint64(first[0])); err != nil {
		t.Fatal(err)
	}
	status := xactStatus(t, ctx, p.standbyDSN, first[0])
	p.sproxy.RefuseNew(false)
	res := <-call.done
	r := p.pool.Stats().Resolved
	n := ledgerCount(t, ctx, p.standbyDSN, "t-1")
	t.Logf("id %d is %q on the new primary; err = %v, fn ran %d times, the row %d times; resolutions %+v", first[0], status, res.err, res.runs, n, r)
	if status != "committed" {
		t.Fatalf("the stranger's id %d is %q on the new primary: the test did not build the reuse", first[0], status)
	}
	if res.err == nil && n != 1 {
		t.Fatalf("the call reported committed, and its row is not on the new primary: the answer was the stranger's")
	}
	if res.err != nil || res.runs != 2 || n != 1 {
		t.Errorf("err = %v, fn ran %d times, the row %d times; want the call run again: success, twice, once", res.err, res.runs, n)
	}
	if r.AbortedCount != 1 || r.LostCount != 1 || r.UnknownCount != 0 {
		t.Errorf("resolutions %+v, want one aborted, lost", r)
	}
}

// TestResolvePromotedCrashedNotBelieved: as TestResolvePromotedLost, and
// then the promoted server writes past the transaction's record and
// recovers from a crash before any question reaches it. Its replay end is
// now the crash recovery's, past the transaction's record, not the branch
// point, and pg_last_xact_replay_timestamp() is NULL (a crash recovery is
// not an archive recovery): the stranger's "committed" must not be taken
// for the transaction's.
func TestResolvePromotedCrashedNotBelieved(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	ctx := testCtxFor(t, 2*time.Minute)
	p := startPromotion(t, ctx)
	p.detach(t, ctx)
	p.sproxy.RefuseNew(true)
	fired := trapCommit(p.pproxy)
	call := startInsert(ctx, p.pool, "t-1")
	first := <-call.first
	<-fired
	waitRow(t, ctx, p.admin, "t-1")
	p.failover(t, ctx)
	if err := takeXid(ctx, p.standbyDSN, uint64(first[0])); err != nil {
		t.Fatal(err)
	}
	newPrimary := directConn(t, p.standbyDSN)
	// Write past the transaction's record on the new timeline, flushed by a
	// commit that survives the crash.
	mustExec(t, ctx, newPrimary, "select pg_logical_emit_message(true, 'fill', repeat('x', greatest(0, $1::int8 - (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8 + 65536)::int))",
		first[1])
	if err := p.standby.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.standby.Start(ctx); err != nil {
		t.Fatal(err)
	}
	after := directConn(t, p.standbyDSN)
	var past, archive bool
	if err := after.QueryRow(ctx, "select pg_last_wal_replay_lsn() >= $1::text::pg_lsn, pg_last_xact_replay_timestamp() is not null",
		lsnText(first[1])).Scan(&past, &archive); err != nil {
		t.Fatal(err)
	}
	status := xactStatus(t, ctx, p.standbyDSN, first[0])
	if !past || archive || status != "committed" {
		t.Fatalf("replay past the record %v, archive recovery %v, the stranger's id %q: the test did not build a later replay end", past, archive, status)
	}
	p.sproxy.RefuseNew(false)
	res := <-call.done
	r := p.pool.Stats().Resolved
	n := ledgerCount(t, ctx, p.standbyDSN, "t-1")
	t.Logf("err = %v, fn ran %d times, the row %d times; resolutions %+v", res.err, res.runs, n, r)
	if res.err == nil && n != 1 {
		t.Fatalf("the call reported committed, and its row is not on the new primary: the crash recovery's replay end was taken for the branch point")
	}
	if !errors.Is(res.err, pgtx.ErrCommitUnknown) || res.runs != 1 || n != 0 || r.ElsewhereCount != 1 {
		t.Errorf("err = %v, fn ran %d times, the row %d times, resolutions %+v; want ErrCommitUnknown (elsewhere), fn once", res.err, res.runs, n, r)
	}
}

// TestResolveRidesOutARestart: COMMIT runs and its answer is lost, and the
// server is down for 7s (an immediate stop, then crash recovery), longer
// than ResolveTimeout's 5s. The resolution waits for it, as a call waits
// for an unavailable server, and the restarted server's end-of-recovery
// checkpoint proves its "committed" is the transaction's: the call succeeds
// within UnavailableTimeout, directly and behind PgBouncer in transaction
// mode (which answers for the server while it is down). Before, it was
// ErrCommitUnknown (unanswered).
func TestResolveRidesOutARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a server of its own")
	}
	for _, behindBouncer := range []bool{false, true} {
		name := map[bool]string{false: "direct", true: "behind PgBouncer"}[behindBouncer]
		t.Run(name, func(t *testing.T) {
			ctx := testCtxFor(t, 2*time.Minute)
			srv, dsn := syncCommitServer(t)
			admin := directConn(t, dsn)
			mustExec(t, ctx, admin, "create table ledger (id text primary key)")
			role, roleDSN := testRole(t, ctx, admin, dsn, "resolver", "")
			mustExec(t, ctx, admin, "grant all on ledger to "+role)
			upstream := srv.Addr()
			if behindBouncer {
				upstream = bouncer.New(t, srv, &bouncer.Config{}).Addr()
			}
			proxy := faultproxy.New(t, upstream)
			through, err := server.DSNWithAddr(roleDSN, proxy.Addr())
			if err != nil {
				t.Fatal(err)
			}
			pool := newPool(t, through, func(c *pgtx.Config) {
				c.MaxConns = 2
				c.CancelMode = pgtx.CancelModeProtocol
				if behindBouncer {
					bouncerSettings(c)
				}
			})
			const downtime = 7 * time.Second
			fired := trapCommit(proxy)
			call := startInsert(ctx, pool, "t-1")
			<-fired
			waitRow(t, ctx, admin, "t-1")
			cut := time.Now()
			if err := srv.Crash(ctx); err != nil {
				t.Fatal(err)
			}
			proxy.RefuseNew(false) // the questions meet the server down
			down := time.NewTimer(downtime)
			<-down.C
			if err := srv.Start(ctx); err != nil {
				t.Fatal(err)
			}
			res := <-call.done
			took := time.Since(cut)
			r := pool.Stats().Resolved
			n := ledgerCount(t, ctx, dsn, "t-1")
			t.Logf("err = %v after %v, fn ran %d times, the row %d times; resolutions %+v", res.err, took.Round(time.Millisecond), res.runs, n, r)
			if res.err != nil || res.runs != 1 || n != 1 || r.CommittedCount != 1 {
				t.Errorf("err = %v, fn ran %d times, the row %d times, resolutions %+v; want success, once, once, one committed", res.err, res.runs, n, r)
			}
			if took < downtime {
				t.Errorf("the call returned %v after the cut, before the server was back (%v)", took, downtime)
			}
		})
	}
}

// TestResolveHoldsNoSlot: while a lost COMMIT is resolved and no server can
// be reached, the call holds no connection of the main pool: its dead
// connection is given back before the resolution waits, so the pool's other
// calls are not left waiting for its slot until their acquire times out.
func TestResolveHoldsNoSlot(t *testing.T) {
	ctx := testCtx(t)
	direct, proxy, through := proxied(t)
	admin := directConn(t, direct)
	mustExec(t, ctx, admin, "create table ledger (id text primary key)")
	pool := newPool(t, through, func(c *pgtx.Config) {
		c.MaxConns = 1
		c.CancelMode = pgtx.CancelModeProtocol
	})
	fired := trapCommit(proxy) // and no question reaches the server
	call := startInsert(ctx, pool, "t-1")
	<-fired
	waitRow(t, ctx, admin, "t-1")
	var held int64
	for deadline := time.Now().Add(2 * time.Second); ; {
		select {
		case res := <-call.done:
			t.Fatalf("the call ended (%v) while no question could reach the server", res.err)
		default:
		}
		held = int64(pool.Stats().Pool.AcquiredConns()) + int64(pool.Stats().InFlight)
		if held == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	proxy.RefuseNew(false)
	res := <-call.done
	t.Logf("while resolving: %d connections held; then err = %v, fn ran %d times; resolutions %+v", held, res.err, res.runs, pool.Stats().Resolved)
	if held != 0 {
		t.Errorf("the resolving call held the pool's connection (acquired conns + in flight = %d) while no server could be reached", held)
	}
	if res.err != nil || res.runs != 1 {
		t.Errorf("err = %v, fn ran %d times; want success once", res.err, res.runs)
	}
}

// xactStatus is pg_xact_status of xid on the server at dsn.
func xactStatus(t *testing.T, ctx context.Context, dsn string, xid int64) string {
	t.Helper()
	var s string
	if err := directConn(t, dsn).QueryRow(ctx, "select pg_xact_status($1::text::xid8)", strconv.FormatInt(xid, 10)).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// lsnText writes a WAL position as pg_lsn's text.
func lsnText(lsn int64) string {
	return strconv.FormatUint(uint64(lsn)>>32, 16) + "/" + strconv.FormatUint(uint64(lsn)&0xffffffff, 16)
}
