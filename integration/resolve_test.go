package integration

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// TestResolveCommittedAfterLostReply: the server commits, the proxy drops
// its answer and cuts the connection. With resolution on the transaction id,
// captured in COMMIT's round trip, tells a fresh connection it committed: the
// call succeeds, fn ran once, the row is there once. Without it the same
// fault is ErrCommitUnknown, and the row is there too (it was ambiguous, not
// failed).
func TestResolveCommittedAfterLostReply(t *testing.T) {
	for _, resolve := range []bool{true, false} {
		name := map[bool]string{true: "resolving", false: "not resolving"}[resolve]
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			direct, proxy, through := proxied(t)
			admin := directConn(t, direct)
			mustExec(t, ctx, admin, "create table ledger (id text primary key)")
			pool := newPool(t, through, func(c *pgtx.Config) {
				if !resolve {
					c.ResolveTimeout = -1
				}
			})
			proxy.CutOnCommitReply(1)
			var runs counter
			err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
				runs.inc()
				_, err := tx.Exec(ctx, "insert into ledger values ('t-1')")
				return err
			})
			if proxy.Stats().CutsOnCommitReply != 1 {
				t.Fatalf("the proxy did not cut at COMMIT's answer")
			}
			rows := queryInt(t, ctx, admin, "select count(*) from ledger")
			if rows != 1 || runs.get() != 1 {
				t.Errorf("rows %d, fn ran %d times; want the committed row once, fn once", rows, runs.get())
			}
			if resolve {
				if err != nil {
					t.Fatalf("err = %v: a COMMIT the server applied must resolve to success", err)
				}
				if r := pool.Stats().Resolved; r.CommittedCount != 1 {
					t.Errorf("resolutions %+v, want one committed", r)
				}
			} else if !errors.Is(err, pgtx.ErrCommitUnknown) {
				t.Fatalf("err = %v, want ErrCommitUnknown", err)
			}
		})
	}
}

// TestResolveAbortedRunsAgain: the backend is terminated while COMMIT runs a
// slow deferred trigger, before the commit record. The id arrived before
// COMMIT ran; the server says the transaction aborted, so pgtx runs it again
// and it applies once.
func TestResolveAbortedRunsAgain(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table ledger (id text primary key)")
	mustExec(t, ctx, admin, `create function slow_commit() returns trigger language plpgsql as $$
		begin perform pg_sleep(0.5); return null; end $$`)
	mustExec(t, ctx, admin, `create constraint trigger slow after insert on ledger deferrable initially deferred
		for each row execute function slow_commit()`)
	pool := newPool(t, dsn, nil) // resolution is on by default
	var runs counter
	terminated := make(chan error, 1)
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if runs.inc() == 1 {
			pid := tx.Conn().PgConn().PID()
			go func() { terminated <- terminateInCommit(ctx, admin, pid) }()
		}
		_, err := tx.Exec(ctx, "insert into ledger values ('t-1')")
		return err
	})
	if terr := <-terminated; terr != nil {
		t.Fatal(terr)
	}
	if err != nil {
		t.Fatalf("err = %v: an aborted COMMIT must run again", err)
	}
	if rows := queryInt(t, ctx, admin, "select count(*) from ledger"); rows != 1 || runs.get() != 2 {
		t.Errorf("rows %d, fn ran %d times; want 1 row, 2 runs", rows, runs.get())
	}
	if r := pool.Stats().Resolved; r.AbortedCount != 1 {
		t.Errorf("resolutions %+v, want one aborted", r)
	}
}

// terminateInCommit waits (bounded) until backend pid runs COMMIT, then
// terminates it.
func terminateInCommit(ctx context.Context, admin *pgx.Conn, pid uint32) error {
	if err := waitInCommit(ctx, admin, pid); err != nil {
		return err
	}
	_, err := admin.Exec(ctx, "select pg_terminate_backend($1)", pid)
	return err
}

// TestResolveNothingWritten: a transaction that writes nothing takes no
// id, and its COMMIT changes nothing: when COMMIT's answer is lost, it is
// run again (NotAppliedCount), which is harmless, and the call succeeds.
func TestResolveNothingWritten(t *testing.T) {
	ctx := testCtx(t)
	_, proxy, through := proxied(t)
	pool := newPool(t, through, nil)
	proxy.CutOnCommitReply(1)
	var runs counter
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		runs.inc()
		_, err := tx.Exec(ctx, "select 1")
		return err
	})
	if err != nil || runs.get() != 2 {
		t.Fatalf("err = %v, runs %d; want success, fn run again", err, runs.get())
	}
	if r := pool.Stats().Resolved; r.CommittedCount != 0 || r.NotAppliedCount != 1 {
		t.Errorf("resolutions %+v, want one not applied", r)
	}
}
