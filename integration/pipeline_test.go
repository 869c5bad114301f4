package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/integration/internal/itest"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
)

// TestKeptTxIsClosed: fn keeps the pgx.Tx it received and uses it after the
// call returned. Every method refuses with pgx.ErrTxClosed: the connection
// is back in the pool, and a statement sent on it would run in another
// caller's session, or outside any transaction.
func TestKeptTxIsClosed(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	pool := newPool(t, dsn, nil)
	tests := []struct {
		name string
		use  func(tx pgx.Tx) error
	}{
		{"Exec", func(tx pgx.Tx) error { _, err := tx.Exec(ctx, "select 1"); return err }},
		{"Exec with args", func(tx pgx.Tx) error { _, err := tx.Exec(ctx, "select $1::int", 1); return err }},
		{"Query", func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, "select 1")
			if err == nil {
				rows.Close()
				err = rows.Err()
			}
			return err
		}},
		{"QueryRow", func(tx pgx.Tx) error { var n int; return tx.QueryRow(ctx, "select 1").Scan(&n) }},
		{"SendBatch", func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue("select 1")
			return tx.SendBatch(ctx, b).Close()
		}},
		{"Prepare", func(tx pgx.Tx) error { _, err := tx.Prepare(ctx, "kept", "select 1"); return err }},
		{"Begin", func(tx pgx.Tx) error { _, err := tx.Begin(ctx); return err }},
		{"CopyFrom", func(tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"kept"}, []string{"n"}, pgx.CopyFromRows([][]any{{1}}))
			return err
		}}, {"Commit", func(tx pgx.Tx) error { return tx.Commit(ctx) }},
		{"Rollback", func(tx pgx.Tx) error { return tx.Rollback(ctx) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, sends := range []bool{false, true} {
				var kept pgx.Tx
				err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					kept = tx
					if sends {
						_, err := tx.Exec(ctx, "select 1")
						return err
					}
					return nil
				})
				if err != nil {
					t.Fatalf("Transaction: %v", err)
				}
				if err := tt.use(kept); !errors.Is(err, pgx.ErrTxClosed) {
					t.Errorf("fn sent a statement: %v; the kept tx's %s after the call: %v, want pgx.ErrTxClosed", sends, tt.name, err)
				}
			}
		})
	}
}

// TestWriteFreeTakesNoID: transactions that write nothing consume no
// transaction id and write no WAL (PostgreSQL gives an id only to a
// transaction that writes, and writes a commit record only for one with an
// id), so read-mostly databases do not move towards wraparound for their
// reads. The WAL position is the server's: another session's writes (an
// autovacuum) could move it, so a run that saw it move is tried again.
func TestWriteFreeTakesNoID(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	for _, iso := range []pgtx.Isolation{pgtx.ReadCommitted, pgtx.RepeatableRead, pgtx.Serializable} {
		t.Run(iso.String(), func(t *testing.T) {
			pool := newPool(t, dsn, nil) // resolution on, the default
			const calls = 50
			var ids, wal int
			for try := 0; try < 3; try++ {
				var id0, wal0 int
				if err := admin.QueryRow(ctx, "select pg_snapshot_xmax(pg_current_snapshot())::text::int, (pg_current_wal_insert_lsn() - '0/0')::int8").Scan(&id0, &wal0); err != nil {
					t.Fatal(err)
				}
				for range calls {
					err := pgtx.Transaction(ctx, pool, iso, func(ctx context.Context, tx pgx.Tx) error {
						var n int
						if err := tx.QueryRow(ctx, "select $1::int", 1).Scan(&n); err != nil {
							return err
						}
						_, err := tx.Exec(ctx, "select 1")
						return err
					})
					if err != nil {
						t.Fatal(err)
					}
				}
				var id1, wal1 int
				if err := admin.QueryRow(ctx, "select pg_snapshot_xmax(pg_current_snapshot())::text::int, (pg_current_wal_insert_lsn() - '0/0')::int8").Scan(&id1, &wal1); err != nil {
					t.Fatal(err)
				}
				ids, wal = id1-id0, wal1-wal0
				if ids == 0 && wal == 0 {
					break
				}
			}
			if ids != 0 || wal != 0 {
				t.Errorf("%d write-free transactions took %d transaction ids and wrote %d bytes of WAL, want none", calls, ids, wal)
			}
		})
	}
}

// TestNothingSentSendsNothing: a fn that sends no statement costs no
// statement: no BEGIN and no COMMIT reach the server.
func TestNothingSentSendsNothing(t *testing.T) {
	ctx := testCtx(t)
	direct, proxy, through := proxied(t)
	pool := newPool(t, through, cancelPoolPast(direct))
	// Warm the pool: the connection's own set-up statements are not the
	// transaction's.
	if err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "select 1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	before := proxy.Stats().Statements
	for range 10 {
		if err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n := proxy.Stats().Statements - before; n != 0 {
		t.Errorf("10 calls whose fn sent nothing sent %d statements, want 0", n)
	}
}

// TestAfterCommitFromGoroutines: fn's goroutines register work with
// AfterCommit while fn waits for them; each runs once after the commit.
// Under the race detector this also proves the registration safe.
func TestAfterCommitFromGoroutines(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, newDB(t), nil)
	var mu sync.Mutex
	ran := 0
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := pgtx.AfterCommit(ctx, func(context.Context) { mu.Lock(); ran++; mu.Unlock() }); err != nil {
					t.Errorf("AfterCommit from a goroutine of fn: %v", err)
				}
			}()
		}
		wg.Wait()
		_, err := tx.Exec(ctx, "select 1")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if ran != 8 {
		t.Errorf("%d of 8 registered functions ran, want 8", ran)
	}
}

// TestResolveIDReadAtCommit: a transaction that writes through what pgtx
// does not see (tx.Conn()) after a first statement that only reads has its
// id read in COMMIT's write, before COMMIT, with a Flush that makes it
// arrive before COMMIT runs. When COMMIT's answer is lost after the id
// arrived, the resolution says committed. When the connection is cut as
// soon as the write left, the id never arrives, and the resolver asks the
// cut backend for the transaction it runs:
//   - once the backend has ended (the question is held until it has),
//     nothing can tell, and the call says so (ErrCommitUnknown,
//     UnansweredCount) without running fn again;
//   - while COMMIT still runs (a deferred trigger waits for a lock the test
//     holds until the question has been asked), the backend tells the id,
//     and the call reports the commit.
func TestResolveIDReadAtCommit(t *testing.T) {
	const (
		backendEnded = iota
		commitRunning
	)
	tests := []struct {
		name        string
		cut         func(*faultproxy.Proxy)
		asked       int // what the question about the cut backend finds; -1: none is asked
		wantUnknown bool
	}{
		{"answer dropped", func(p *faultproxy.Proxy) { p.CutOnCommitReply(1) }, -1, false},
		{"cut as the write left", func(p *faultproxy.Proxy) { p.CutOnCommit(1) }, backendEnded, true},
		{"cut as the write left, COMMIT still running", func(p *faultproxy.Proxy) { p.CutOnCommit(1) }, commitRunning, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			direct, proxy, through := proxied(t)
			admin := directConn(t, direct)
			watcher := directConn(t, direct) // used from the proxy's goroutine
			mustExec(t, ctx, admin, "create table ledger (id text primary key)")
			// The lock a COMMIT of a row 'held' waits for at its deferred
			// trigger, until the test releases it.
			mustExec(t, ctx, admin, `create function wait_at_commit() returns trigger language plpgsql as $$
				begin
					if new.id = 'held' then perform pg_advisory_xact_lock(4711); end if;
					return null;
				end $$`)
			mustExec(t, ctx, admin, `create constraint trigger wait after insert on ledger deferrable initially deferred
				for each row execute function wait_at_commit()`)
			row := "t-1"
			if tt.asked == commitRunning {
				row = "held"
				lock := directConn(t, direct)
				mustExec(t, ctx, lock, "select pg_advisory_lock(4711)")
				t.Cleanup(func() { _, _ = lock.Exec(context.Background(), "select pg_advisory_unlock_all()") })
				asked, stop, released := make(chan struct{}), make(chan struct{}), make(chan struct{})
				var once sync.Once
				// The resolver asks about the id only once the backend
				// has told it (backend_xid); the lock is released then.
				watchAsk(t, proxy, "pg_prepared_xacts", func() { once.Do(func() { close(asked) }) })
				go func() {
					defer close(released)
					select {
					case <-asked:
					case <-stop:
						return
					}
					if _, err := lock.Exec(ctx, "select pg_advisory_unlock_all()"); err != nil {
						t.Errorf("release the lock COMMIT waits for: %v", err)
					}
				}()
				t.Cleanup(func() { close(stop); <-released })
			}
			pool := newPool(t, through, nil)
			var pid atomic.Uint32
			if tt.asked == backendEnded {
				// Hold the question about the cut backend until that
				// backend has ended: on a loaded machine the resolver
				// can otherwise find it still running COMMIT, and
				// rightly learn the id from it (the next row).
				watchAsk(t, proxy, "backend_xid", func() { itest.WaitBackendGone(t, ctx, watcher, int64(pid.Load())) })
			}
			tt.cut(proxy)
			var runs counter
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				runs.inc()
				pid.Store(tx.Conn().PgConn().PID())
				var n int
				if err := tx.QueryRow(ctx, "select count(*) from ledger").Scan(&n); err != nil {
					return err
				}
				_, err := tx.Conn().Exec(ctx, "insert into ledger values ($1)", row)
				return err
			})
			rows := queryInt(t, ctx, admin, "select count(*) from ledger")
			r := pool.Stats().Resolved
			if tt.wantUnknown {
				if !errors.Is(err, pgtx.ErrCommitUnknown) || r.UnansweredCount != 1 {
					t.Errorf("err = %v, resolutions %+v; want ErrCommitUnknown, one unanswered", err, r)
				}
			} else if err != nil || r.CommittedCount != 1 {
				t.Errorf("err = %v, resolutions %+v; want success, one committed", err, r)
			}
			if runs.get() != 1 || rows != 1 {
				t.Errorf("fn ran %d times, %d rows; want once, 1 row", runs.get(), rows)
			}
		})
	}
}

// watchAsk calls f in the proxy, before forwarding it, at each statement
// whose SQL contains marker: backend_xid when the resolver asks which
// transaction a backend runs, pg_prepared_xacts when it asks what became
// of an id. SlowStatements runs its matcher in the proxy before it
// forwards a statement; this one matches nothing, so nothing is held (the
// duration is never used), and f blocks the statement while it runs.
func watchAsk(t *testing.T, proxy *faultproxy.Proxy, marker string, f func()) {
	t.Helper()
	proxy.SlowStatements(func(sql string) bool {
		if strings.Contains(sql, marker) {
			f()
		}
		return false
	}, time.Millisecond)
}

// TestResolveByFaultReadFirst is TestResolveByFault's proxy faults for a
// transaction whose first statement only reads: the statements after it
// read the id in their own write until it has one, so it is known before
// COMMIT is sent, and every ambiguous COMMIT is resolved, and rightly (a
// nil error means the row is there once; a rerun never doubles it).
func TestResolveByFaultReadFirst(t *testing.T) {
	faults := []struct {
		name        string
		arm         func(p *faultproxy.Proxy)
		allResolved bool
	}{
		{"cut before COMMIT", func(p *faultproxy.Proxy) { p.CutBeforeForward(faultproxy.IsCommit, 1) }, true},
		{"cut after COMMIT", func(p *faultproxy.Proxy) { p.CutOnCommit(1) }, true},
		{"answer dropped", func(p *faultproxy.Proxy) { p.CutOnCommitReply(1) }, true},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			ctx := testCtx(t)
			env := newFaultEnv(t, false)
			mustExec(t, ctx, env.admin, "create table ledger (id text primary key)")
			pool := newPool(t, env.through, nil)
			unknown := 0
			for i := range resolveRounds {
				f.arm(env.proxy)
				id := fmt.Sprint("t-", i)
				var runs counter
				err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					runs.inc()
					var n int
					if err := tx.QueryRow(ctx, "select count(*) from ledger").Scan(&n); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "insert into ledger values ($1)", id)
					return err
				})
				n := env.count(t, ctx, "select count(*) from ledger where id = $1", id)
				switch {
				case errors.Is(err, pgtx.ErrCommitUnknown):
					unknown++
					if n > 1 || runs.get() != 1 {
						t.Errorf("round %d: unknown, with the row %d times and fn run %d times", i, n, runs.get())
					}
				case err != nil:
					t.Fatalf("round %d: %v", i, err)
				case n != 1:
					t.Errorf("round %d: resolved wrongly: the call succeeded, the row is there %d times", i, n)
				}
			}
			r := pool.Stats().Resolved
			t.Logf("%s, first statement a read: %d ambiguous COMMITs, resolved %d (committed %d, aborted %d), unknown %d (unanswered %d)",
				f.name, r.CommittedCount+r.AbortedCount+r.UnknownCount, r.CommittedCount+r.AbortedCount, r.CommittedCount, r.AbortedCount, r.UnknownCount, r.UnansweredCount)
			if r.UnknownCount != int64(unknown) {
				t.Errorf("UnknownCount %d, calls that returned ErrCommitUnknown %d", r.UnknownCount, unknown)
			}
			if f.allResolved && unknown > 0 {
				t.Errorf("%d of %d unresolved; the id is known before COMMIT is sent", unknown, resolveRounds)
			}
		})
	}
}

// TestWriteFreeCommitKeepsTheDeadline: the COMMIT of a transaction that
// provably wrote nothing changes nothing, so it keeps the caller's
// deadline like any statement: when the network stalls it, the call ends
// at the deadline (its error matches the context's), not at CommitTimeout.
func TestWriteFreeCommitKeepsTheDeadline(t *testing.T) {
	_, proxy, through := proxied(t)
	pool := newPool(t, through, func(c *pgtx.Config) { c.CancelGrace = 100 * time.Millisecond })
	t.Cleanup(func() { proxy.ReleaseStalled() })
	proxy.StallOnCommit(1)
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		var n int
		return tx.QueryRow(ctx, "select 1").Scan(&n)
	})
	took := time.Since(start)
	if proxy.Stats().Stalls != 1 {
		t.Fatalf("the proxy stalled %d connections, want 1", proxy.Stats().Stalls)
	}
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, pgtx.ErrCommitUnknown) {
		t.Errorf("err = %v, want the context's deadline, not an unknown outcome", err)
	}
	if took > 2*time.Second {
		t.Errorf("the call took %v: the COMMIT of a write-free transaction ran past the 300ms deadline", took)
	}
}
