package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// TestResolveCommittedOnlyLocally: the primary has a synchronous standby,
// and the standby is down, so a COMMIT writes its record and waits for an
// acknowledgement that does not come. Its connection is cut. The resolver
// finds the transaction in progress (its backend waiting), ends the backend,
// and then the server says "committed": committed locally only, and lost if
// the standby, which never had it, is promoted. A COMMIT that had returned
// would have waited for the standby; so must the resolution's "committed".
// With the standby still down, the outcome is ErrCommitUnknown, never nil;
// with the standby streaming, a lost answer resolves as committed.
func TestResolveCommittedOnlyLocally(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	ctx := testCtx(t)
	primary, standby, dsn := syncCommitPair(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table ledger (id text primary key)")
	makeSynchronous(t, ctx, admin)
	// A plain role: the question's look at the standbys and its message
	// need no privilege.
	role, roleDSN := testRole(t, ctx, admin, dsn, "resolver", "")
	mustExec(t, ctx, admin, "grant all on ledger to "+role)
	proxy, through := proxyTo(t, primary.Addr(), roleDSN)
	pool := newPool(t, through, func(c *pgtx.Config) {
		c.MaxConns = 2
		c.ResolveTimeout = 4 * time.Second
	})
	// With the standby streaming, a COMMIT whose answer is lost is
	// resolved: the question's own commit waits for the standby, and gets
	// its acknowledgement.
	proxy.CutOnCommitReply(1)
	if err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "insert into ledger values ('before')")
		return err
	}); err != nil || pool.Stats().Resolved.CommittedCount != 1 {
		t.Fatalf("err = %v, resolutions %+v: with the standby up, a dropped answer resolves as committed", err, pool.Stats().Resolved)
	}

	if err := standby.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Before the database is dropped: its commit waits for the standby.
		if err := standby.Start(context.Background()); err != nil {
			t.Errorf("start the standby again: %v", err)
		}
	})

	var runs counter
	pids := make(chan uint32, 1)
	done := make(chan error, 1)
	go func() {
		done <- pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			runs.inc()
			pids <- tx.Conn().PgConn().PID()
			_, err := tx.Exec(ctx, "insert into ledger values ('a')")
			return err
		})
	}()
	pid := <-pids
	if err := waitSyncRepWait(ctx, admin, pid); err != nil {
		t.Fatal(err)
	}
	proxy.CutAll() // the COMMIT's answer, and its connection, are lost
	err := <-done
	local := queryInt(t, ctx, admin, "select count(*) from ledger where id = 'a'")
	r := pool.Stats().Resolved
	t.Logf("err = %v; committed locally: %d; resolutions %+v", err, local, r)
	if err == nil {
		t.Fatalf("the call reported committed for a COMMIT only the primary has (fn ran %d times): promoting its synchronous standby would lose it", runs.get())
	}
	if !errors.Is(err, pgtx.ErrCommitUnknown) || runs.get() != 1 || r.UnansweredCount != 1 || r.CommittedCount != 1 || !strings.Contains(err.Error(), "no answer within ResolveTimeout") {
		t.Errorf("err = %v, fn ran %d times, resolutions %+v; want ErrCommitUnknown, unanswered, fn once", err, runs.get(), r)
	}
	if local != 1 {
		t.Errorf("the primary holds the row %d times: the test did not build a local-only commit", local)
	}
	// The resolution's questions wait for the standby one at a time, not
	// one backend per question.
	if n := queryInt(t, ctx, admin, "select count(*) from pg_stat_activity where wait_event = 'SyncRep' and query like '%pgtx: resolved a commit%'"); n > 1 {
		t.Errorf("%d questions wait for the standby, want at most one", n)
	}
	if !strings.Contains(err.Error(), "synchronous standbys had not acknowledged it") {
		t.Errorf("err = %v: it must say the standby has not acknowledged the commit", err)
	}
}

// waitSyncRepWait waits (bounded) until backend pid waits for its
// synchronous standby.
func waitSyncRepWait(ctx context.Context, admin *pgx.Conn, pid uint32) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		var n int
		if err := admin.QueryRow(ctx, "select count(*) from pg_stat_activity where pid = $1 and wait_event = 'SyncRep'", pid).Scan(&n); err != nil {
			return err
		}
		if n == 1 {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return errors.New("the backend never waited for its synchronous standby")
}
