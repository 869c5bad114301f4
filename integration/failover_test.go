package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// Bounds of TestResolveFailover.
const (
	failoverWorkers = 8
	failoverBefore  = time.Second     // of writes before the primary is stopped
	failoverAfter   = 2 * time.Second // of writes after the promote
	failoverStall   = time.Second     // the longest gap allowed, beside the promote's own time
)

// TestResolveFailover: eight workers insert unique ids through a pool whose
// connection string names a primary and its synchronous standby
// (target_session_attrs=read-write). The primary is stopped at once
// (immediate shutdown) while COMMITs are in flight, and the standby is
// promoted. The pool reconnects to the new primary, a new system timeline.
// Every call reported successful is in the new primary's ledger exactly
// once, no id is there twice, no call that failed is there, and a COMMIT
// whose answer was lost with the old primary is resolved on the new
// timeline only as its replay proves (committed, or not and run again),
// else ErrCommitUnknown: never with the answer of another transaction
// given the same id there. And no stall: after the promote, successful commits resume, with
// no gap between them longer than failoverStall plus the promote's own time.
func TestResolveFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	ctx := testCtx(t)
	// The harness turns synchronous_commit off for speed; replication
	// waits only with it on.
	primary, standby, dsn := syncCommitPair(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table ledger (id text not null)")
	// Synchronous replication: a COMMIT acknowledged by the old primary is
	// on the standby, so a success can be checked against the new primary.
	makeSynchronous(t, ctx, admin)

	pool := newPool(t, failoverDSN(t, dsn, primary.Addr(), standby.Addr()), func(c *pgtx.Config) {
		c.MaxConns = failoverWorkers
		c.ConnConfig.ConnectTimeout = time.Second
		c.Retry.MaxRetries = 50
		c.Retry.MaxBackoff = 200 * time.Millisecond
		c.Retry.BudgetRatio = -1
	})

	type call struct {
		id   string
		err  error
		done time.Time
	}
	var (
		mu    sync.Mutex
		calls []call
		wg    sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := range failoverWorkers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				err := pgtx.Transaction(cctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "insert into ledger values ($1)", id)
					return err
				})
				cancel()
				mu.Lock()
				calls = append(calls, call{id: id, err: err, done: time.Now()})
				mu.Unlock()
			}
		})
	}
	time.Sleep(failoverBefore)
	crashed := time.Now()
	if err := primary.Crash(ctx); err != nil {
		close(stop)
		wg.Wait()
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		close(stop)
		wg.Wait()
		t.Fatal(err)
	}
	promoted := time.Now()
	time.Sleep(failoverAfter)
	close(stop)
	wg.Wait()
	// The old primary comes back on its own, old timeline, for the
	// cleanup that drops the test's database there.
	// It no longer has a standby to wait for.
	if err := primary.Start(ctx); err != nil {
		t.Errorf("restart the old primary: %v", err)
	} else {
		old := directConn(t, dsn)
		mustExec(t, ctx, old, "alter system reset synchronous_standby_names")
		mustExec(t, ctx, old, "select pg_reload_conf()")
	}

	newPrimary := directConn(t, standby.DSN(dbName(t, dsn)))
	present := ledgerIDs(t, ctx, newPrimary)

	var ok, unknown, failed, wrong int
	var successes []time.Time
	for _, c := range calls {
		n := present[c.id]
		switch {
		case n > 1:
			wrong++
			t.Errorf("%s is in the ledger %d times", c.id, n)
		case c.err == nil:
			ok++
			successes = append(successes, c.done)
			if n != 1 {
				wrong++
				t.Errorf("%s was reported committed (%v after the crash, the promote ended at %v) and is not in the new primary's ledger",
					c.id, c.done.Sub(crashed).Round(time.Millisecond), promoted.Sub(crashed).Round(time.Millisecond))
			}
		case errors.Is(c.err, pgtx.ErrCommitUnknown):
			unknown++
		default:
			failed++
			if n != 0 {
				wrong++
				t.Errorf("%s failed (%v) and is in the ledger", c.id, c.err)
			}
		}
	}
	res := pool.Stats().Resolved
	t.Logf("%d calls: %d committed, %d ErrCommitUnknown, %d failed; wrong %d; promote took %v; resolutions %+v",
		len(calls), ok, unknown, failed, wrong, promoted.Sub(crashed).Round(time.Millisecond), res)

	// No stall: successes resume after the promote, and their gaps stay
	// short (the first gap spans the crash and the promote).
	slices.SortFunc(successes, func(a, b time.Time) int { return a.Compare(b) })
	bound := failoverStall + promoted.Sub(crashed)
	prev := crashed
	after := 0
	for _, s := range successes {
		if s.Before(crashed) {
			continue
		}
		if gap := s.Sub(prev); gap > bound {
			t.Errorf("no commit succeeded for %v (from %v after the crash), want at most %v", gap.Round(time.Millisecond),
				prev.Sub(crashed).Round(time.Millisecond), bound)
		}
		prev = s
		if s.After(promoted) {
			after++
		}
	}
	if after == 0 {
		t.Fatalf("no commit succeeded after the promote")
	}
	if end := promoted.Add(failoverAfter); end.Sub(prev) > bound {
		t.Errorf("the last success came %v before the end of the run", end.Sub(prev).Round(time.Millisecond))
	}
}

// makeSynchronous makes every standby of the primary (admin's server)
// synchronous, and waits until one is.
func makeSynchronous(t *testing.T, ctx context.Context, admin *pgx.Conn) {
	t.Helper()
	mustExec(t, ctx, admin, "alter system set synchronous_standby_names = '*'")
	mustExec(t, ctx, admin, "select pg_reload_conf()")
	waitSync(t, ctx, admin)
}

// waitSync waits until the primary has a synchronous standby.
func waitSync(t *testing.T, ctx context.Context, admin *pgx.Conn) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := admin.QueryRow(ctx, "select count(*) from pg_stat_replication where sync_state = 'sync'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the standby never became synchronous")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// failoverDSN is dsn with two hosts, the primary's and the standby's, of
// which a connection takes the one that accepts writes.
func failoverDSN(t *testing.T, dsn, primaryAddr, standbyAddr string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var hosts, ports []string
	for _, a := range []string{primaryAddr, standbyAddr} {
		h, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		hosts, ports = append(hosts, h), append(ports, p)
	}
	return fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable target_session_attrs=read-write",
		strings.Join(hosts, ","), strings.Join(ports, ","), u.User.Username(), dbName(t, dsn))
}

// dbName is the database of a URL dsn.
func dbName(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// TestResolveNotAskedElsewhere: a transaction's id is given by the old
// primary and never replicated (the standby was detached first); COMMIT is
// in flight, running a slow deferred trigger, when the old primary stops at
// once, so the transaction did not commit anywhere. The standby is promoted
// and gives the same id to a transaction of its own, which commits. The
// question about the lost COMMIT reaches the new primary only then (the
// network to it is slow), where pg_xact_status says "committed" of the
// stranger's transaction. The call must not report success for a transfer
// that is nowhere: the promoted standby's replay stopped short of the
// transaction's record, which proves it did not commit there, and the call
// runs again on the new primary.
func TestResolveNotAskedElsewhere(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	ctx := testCtx(t)
	primary, standby, dsn := serverPair(t, nil)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table ledger (id text not null)")
	mustExec(t, ctx, admin, `create function slow_commit() returns trigger language plpgsql as $$
		begin perform pg_sleep(2); return null; end $$`)
	mustExec(t, ctx, admin, `create constraint trigger slow after insert on ledger deferrable initially deferred
		for each row execute function slow_commit()`)
	standbyDSN, err := server.DSNWithAddr(dsn, standby.Addr())
	if err != nil {
		t.Fatal(err)
	}
	waitReplicatedTable(t, ctx, standbyDSN)
	// Detach the standby: nothing the primary writes from now on reaches it.
	standbyAdmin := directConn(t, standby.DSN(""))
	mustExec(t, ctx, standbyAdmin, "alter system set primary_conninfo = ''")
	mustExec(t, ctx, standbyAdmin, "select pg_reload_conf()")
	waitDetached(t, ctx, admin)

	// The pool reaches the standby through a slow network, so a question
	// asked there arrives after the id has been given again.
	slow := faultproxy.New(t, standby.Addr())
	pool := newPool(t, failoverDSN(t, dsn, primary.Addr(), slow.Addr()), func(c *pgtx.Config) {
		c.MaxConns = 2
		c.ConnConfig.ConnectTimeout = 20 * time.Second
		c.CancelConnectTimeout = 20 * time.Second // the resolution connects over the cancel pool
		c.ResolveTimeout = 30 * time.Second
	})

	var xid uint64
	var runs counter
	crashed := make(chan error, 1)
	err = pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		runs.inc()
		if _, err := tx.Exec(ctx, "insert into ledger values ('t-1')"); err != nil {
			return err
		}
		if xid != 0 {
			return nil // run again, on the new primary
		}
		if err := tx.QueryRow(ctx, "select pg_current_xact_id()::text::bigint").Scan(&xid); err != nil {
			return err
		}
		pid := tx.Conn().PgConn().PID()
		slow.SetLatency(300 * time.Millisecond)
		go func() {
			// While COMMIT runs the trigger: stop the primary, promote the
			// standby, and commit the same id there.
			conn, err := pgx.Connect(ctx, dsn)
			if err == nil {
				err = waitInCommit(ctx, conn, pid)
				_ = conn.Close(ctx)
			}
			if err == nil {
				err = primary.Crash(ctx)
			}
			if err == nil {
				err = standby.Promote(ctx)
			}
			if err == nil {
				err = takeXid(ctx, standbyDSN, xid)
			}
			crashed <- err
		}()
		return nil
	})
	if cerr := <-crashed; cerr != nil {
		t.Fatal(cerr)
	}
	res := pool.Stats().Resolved
	rows := queryInt(t, ctx, directConn(t, standbyDSN), "select count(*) from ledger where id = 't-1'")
	t.Logf("err = %v, fn ran %d times, the row %d times on the new primary; resolutions %+v", err, runs.get(), rows, res)
	if err == nil && runs.get() == 1 {
		t.Fatalf("the call reported success from its first run, and transfer t-1 is nowhere: the new primary's answer about id %d was another transaction's", xid)
	}
	if err != nil || runs.get() != 2 || rows != 1 || res.LostCount != 1 {
		t.Errorf("err = %v, fn ran %d times, the row %d times, resolutions %+v; want the call run again (its record not replayed by the promoted standby): success, twice, once",
			err, runs.get(), rows, res)
	}
	if err := primary.Start(ctx); err != nil {
		t.Errorf("restart the old primary: %v", err)
	}
}

// waitReplicatedTable waits until the ledger table exists on the standby.
func waitReplicatedTable(t *testing.T, ctx context.Context, standbyDSN string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		conn, err := pgx.Connect(ctx, standbyDSN)
		if err == nil {
			var n int
			err = conn.QueryRow(ctx, "select count(*) from pg_trigger where tgname = 'slow'").Scan(&n)
			_ = conn.Close(ctx)
			if err == nil && n == 1 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby never had the ledger: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitDetached waits until the primary has no standby streaming from it.
func waitDetached(t *testing.T, ctx context.Context, admin *pgx.Conn) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if queryInt(t, ctx, admin, "select count(*) from pg_stat_replication") == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the standby is still streaming")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// takeXid commits transactions on the new primary until one of them has
// transaction id xid.
func takeXid(ctx context.Context, dsn string, xid uint64) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for range 10000 {
		var got uint64
		if err := conn.QueryRow(ctx, "select pg_current_xact_id()::text::bigint").Scan(&got); err != nil {
			return err
		}
		switch {
		case got == xid:
			return nil
		case got > xid:
			return fmt.Errorf("the new primary is past id %d (at %d): it was replicated", xid, got)
		}
	}
	return fmt.Errorf("the new primary never reached id %d", xid)
}
