package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/failover"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// lostCommits is how many commits each phase of TestLostCommits makes.
const lostCommits = 5

// lostTracer records a pool's failover events.
type lostTracer struct {
	nopTracer
	mu          sync.Mutex
	lost        []failover.CommitLostData
	replication []failover.ReplicationData
	event       chan struct{} // a signal per event
}

var _ failover.Tracer = (*lostTracer)(nil)

func (l *lostTracer) TraceCommitLost(_ context.Context, d failover.CommitLostData) {
	l.mu.Lock()
	l.lost = append(l.lost, d)
	l.mu.Unlock()
	l.event <- struct{}{}
}

func (l *lostTracer) TraceReplication(_ context.Context, d failover.ReplicationData) {
	l.mu.Lock()
	l.replication = append(l.replication, d)
	l.mu.Unlock()
	l.event <- struct{}{}
}

// seen returns what the tracer was told so far.
func (l *lostTracer) seen() ([]failover.CommitLostData, []failover.ReplicationData) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lost), slices.Clone(l.replication)
}

// await waits for events until done holds, and fails the test when ctx
// ends first.
func (l *lostTracer) await(t *testing.T, ctx context.Context, what string, done func() bool) {
	t.Helper()
	for !done() {
		select {
		case <-l.event:
		case <-ctx.Done():
			lost, rep := l.seen()
			t.Fatalf("waiting for %s: %v; told %+v and %+v", what, ctx.Err(), lost, rep)
		}
	}
}

// acked is a commit a call reported, with its id and when.
type acked struct {
	id            string
	xid           uint64
	before, after time.Time
}

// TestLostCommits: a primary with an asynchronous standby, a pool of a
// plain role writing through a connection string that names both. The pool
// is told once, at its first commit, that the server acknowledges commits
// no standby has. Commits that replicated; then the standby stops
// receiving WAL (replay paused would not do: PostgreSQL 15 ends the pause
// at promotion and replays every record it received first); commits the
// standby never gets; the primary is lost (immediate shutdown) and the
// standby promoted. On the new primary the first lost id is given again to
// a transaction that commits, the second to one that aborts, the others are
// not given yet. When the pool meets the new timeline (at a connection's
// first transaction, one that writes nothing) it asks once: every lost
// commit is reported, with its label, id, time and timelines, and counted,
// the one whose id a stranger committed too (the promoted standby's replay
// stopped short of the WAL mark the lost transaction wrote); every kept
// commit is proven survived (its replay went past their marks), none
// unproven; and the pool is told the new primary has no standby.
func TestLostCommits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	ctx := testCtxFor(t, 3*time.Minute)
	primary, standby, dsn := syncCommitPair(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table ledger (id text primary key)")
	role, roleDSN := testRole(t, ctx, admin, dsn, "lost", "")
	mustExec(t, ctx, admin, "grant select, insert on ledger to "+role)
	standbyDSN, err := server.DSNWithAddr(dsn, standby.Addr())
	if err != nil {
		t.Fatal(err)
	}
	waitRows(t, ctx, standbyDSN, "select count(*) from pg_roles where rolname = '"+role+"'", 1)
	waitStreaming(t, ctx, admin)

	tracer := &lostTracer{event: make(chan struct{}, 64)}
	pool := newPool(t, failoverDSN(t, roleDSN, primary.Addr(), standby.Addr()), func(c *pgtx.Config) {
		c.MaxConns = 2
		c.ConnConfig.ConnectTimeout = 2 * time.Second
		c.Tracer = tracer
	})
	commit := func(label string, i int) acked {
		t.Helper()
		a := acked{id: fmt.Sprintf("%s-%d", label, i), before: time.Now()}
		err := pgtx.TransactionWithOptions(ctx, pool, pgtx.ReadCommitted, pgtx.Options{Label: label}, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "insert into ledger values ($1)", a.id); err != nil {
				return err
			}
			return tx.QueryRow(ctx, "select pg_current_xact_id()::text::bigint").Scan(&a.xid)
		})
		if err != nil {
			t.Fatalf("%s: %v", a.id, err)
		}
		a.after = time.Now()
		return a
	}

	// Replicated commits, and the notice of the asynchronous standby.
	for i := range lostCommits {
		commit("kept", i)
	}
	tracer.await(t, ctx, "the notice of the asynchronous standby", func() bool { _, r := tracer.seen(); return len(r) > 0 })
	waitRows(t, ctx, standbyDSN, "select count(*) from ledger", lostCommits)

	// The standby gets nothing more; these commits live on the primary only.
	standbyAdmin := directConn(t, standby.DSN(""))
	mustExec(t, ctx, standbyAdmin, "alter system set primary_conninfo = ''")
	mustExec(t, ctx, standbyAdmin, "select pg_reload_conf()")
	waitDetached(t, ctx, admin)
	var lost []acked
	for i := range lostCommits {
		lost = append(lost, commit("lost", i))
	}
	if _, rep := tracer.seen(); len(rep) != 1 || rep[0] != (failover.ReplicationData{Asynchronous: true, Standbys: 1,
		SynchronousCommit: "on", Timeline: 1}) {
		t.Errorf("told of replication %+v, want once: asynchronous, one standby, on timeline 1", rep)
	}

	crashAndPromote(t, ctx, primary, standby)
	newPrimary := directConn(t, standbyDSN)
	if err := giveXids(ctx, newPrimary, lost[0].xid, true); err != nil {
		t.Fatal(err)
	}
	if err := giveXids(ctx, newPrimary, lost[1].xid, false); err != nil {
		t.Fatal(err)
	}

	// The pool meets the new timeline at a connection's first
	// transaction, which writes nothing.
	meetNewServer(t, ctx, pool)
	tracer.await(t, ctx, "the lost commits", func() bool {
		s := pool.Stats()
		return s.LostCommitCount+s.UnprovenCommitCount+s.SurvivedCommitCount == 2*lostCommits
	})
	s := pool.Stats()
	reported, rep := tracer.seen()
	t.Logf("lost %d, unproven %d, survived %d; reported %+v; replication %+v",
		s.LostCommitCount, s.UnprovenCommitCount, s.SurvivedCommitCount, reported, rep)

	want := map[uint64]string{lost[0].xid: "committed", lost[1].xid: "aborted"}
	for _, a := range lost[2:] {
		want[a.xid] = "not yet assigned"
	}
	for _, r := range reported {
		a := findAcked(lost, r.Xid)
		switch {
		case want[r.Xid] == "":
			t.Errorf("reported %+v, which is not a lost commit", r)
		case r.Status != want[r.Xid] || r.Label != "lost" || r.Timeline != 1 || r.NewTimeline != 2:
			t.Errorf("reported %+v, want label lost, timelines 1 → 2, status %q", r, want[r.Xid])
		case r.CommittedAt.Before(a.before) || r.CommittedAt.After(a.after):
			t.Errorf("reported %+v committed at %v, outside its call (%v to %v)", r, r.CommittedAt, a.before, a.after)
		}
		delete(want, r.Xid)
	}
	if len(want) != 0 {
		t.Errorf("not reported: %v", want)
	}
	if s.LostCommitCount != lostCommits || s.UnprovenCommitCount != 0 || s.SurvivedCommitCount != lostCommits {
		t.Errorf("counted %d lost, %d unproven and %d survived, want %d lost, none unproven, %d survived",
			s.LostCommitCount, s.UnprovenCommitCount, s.SurvivedCommitCount, lostCommits, lostCommits)
	}
	if len(rep) != 2 || rep[1] != (failover.ReplicationData{Standbys: 0, SynchronousCommit: "on", Timeline: 2}) {
		t.Errorf("told of replication %+v, want the new primary without a standby after the first notice", rep)
	}

	// The loss is real: the new primary has the kept rows only.
	if n := queryInt(t, ctx, newPrimary, "select count(*) from ledger where id like 'kept-%'"); n != lostCommits {
		t.Errorf("the new primary has %d kept rows, want %d", n, lostCommits)
	}
	if n := queryInt(t, ctx, newPrimary, "select count(*) from ledger where id like 'lost-%'"); n != 0 {
		t.Errorf("the new primary has %d lost rows, want none", n)
	}
}

// meetNewServer runs transactions that write nothing on pool until one
// succeeds: the pool's idle connections to a lost server fail first, and
// the first transaction of a connection to the new one captures its run.
func meetNewServer(t *testing.T, ctx context.Context, pool *pgtx.Pool) {
	t.Helper()
	read := func() error {
		return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "select 1")
			return err
		})
	}
	for err := read(); err != nil; err = read() {
		if ctx.Err() != nil {
			t.Fatal(err)
		}
	}
}

// findAcked returns the commit of as whose id is xid.
func findAcked(as []acked, xid uint64) acked {
	for _, a := range as {
		if a.xid == xid {
			return a
		}
	}
	return acked{}
}

// giveXids commits transactions on conn until the next one would take id
// xid, then gives xid to a transaction that commits, or aborts.
func giveXids(ctx context.Context, conn *pgx.Conn, xid uint64, commit bool) error {
	for range 10000 {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		var got uint64
		if err := tx.QueryRow(ctx, "select pg_current_xact_id()::text::bigint").Scan(&got); err != nil {
			return errors.Join(err, tx.Rollback(ctx))
		}
		switch {
		case got > xid:
			return errors.Join(fmt.Errorf("the new primary is past id %d (at %d)", xid, got), tx.Rollback(ctx))
		case got == xid && !commit:
			return tx.Rollback(ctx)
		}
		if err := tx.Commit(ctx); err != nil || got == xid {
			return err
		}
	}
	return fmt.Errorf("the new primary never reached id %d", xid)
}

// waitRows waits until query, on a connection of its own to dsn, counts
// want.
func waitRows(t *testing.T, ctx context.Context, dsn, query string, want int) {
	t.Helper()
	var n int
	var err error
	for {
		var conn *pgx.Conn
		if conn, err = pgx.Connect(ctx, dsn); err == nil {
			err = conn.QueryRow(ctx, query).Scan(&n)
			_ = conn.Close(ctx)
		}
		if err == nil && n == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %d, %v; want %d", query, n, err, want)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitStreaming waits until a standby streams from admin's server.
func waitStreaming(t *testing.T, ctx context.Context, admin *pgx.Conn) {
	t.Helper()
	for queryInt(t, ctx, admin, "select count(*) from pg_stat_replication where state = 'streaming'") != 1 {
		select {
		case <-ctx.Done():
			t.Fatal("the standby never streamed")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestNoCommitLostUnderSynchronousReplication: with a synchronous standby
// every acknowledged commit is on it, so after the primary is lost and the
// standby promoted, none is reported lost: each is proven survived (the
// promoted standby replayed past every commit's WAL mark), and the pool is
// never told of asynchronous replication.
func TestNoCommitLostUnderSynchronousReplication(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	ctx := testCtxFor(t, 3*time.Minute)
	primary, standby, dsn := syncCommitPair(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table ledger (id text primary key)")
	makeSynchronous(t, ctx, admin)

	tracer := &lostTracer{event: make(chan struct{}, 64)}
	pool := newPool(t, failoverDSN(t, dsn, primary.Addr(), standby.Addr()), func(c *pgtx.Config) {
		c.MaxConns = 2
		c.ConnConfig.ConnectTimeout = 2 * time.Second
		c.Tracer = tracer
	})
	const commits = 2 * lostCommits
	for i := range commits {
		err := pgtx.TransactionWithOptions(ctx, pool, pgtx.ReadCommitted, pgtx.Options{Label: "kept"}, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "insert into ledger values ($1)", fmt.Sprint("kept-", i))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := primary.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The old primary comes back, without a standby to wait for, for
		// the cleanup that drops the test's database there.
		if err := primary.Start(context.Background()); err != nil {
			t.Errorf("restart the old primary: %v", err)
			return
		}
		old, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Errorf("connect to the old primary: %v", err)
			return
		}
		defer old.Close(context.Background())
		_, _ = old.Exec(context.Background(), "alter system reset synchronous_standby_names")
		_, _ = old.Exec(context.Background(), "select pg_reload_conf()")
	})
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	meetNewServer(t, ctx, pool)
	for s := pool.Stats(); s.LostCommitCount+s.UnprovenCommitCount+s.SurvivedCommitCount != commits; s = pool.Stats() {
		select {
		case <-ctx.Done():
			t.Fatalf("judged %+v of %d commits", s, commits)
		case <-time.After(20 * time.Millisecond):
		}
	}
	s := pool.Stats()
	lost, rep := tracer.seen()
	t.Logf("lost %d, unproven %d, survived %d", s.LostCommitCount, s.UnprovenCommitCount, s.SurvivedCommitCount)
	if s.LostCommitCount != 0 || len(lost) != 0 {
		t.Errorf("reported lost %+v (%d counted) under synchronous replication", lost, s.LostCommitCount)
	}
	if s.SurvivedCommitCount != commits {
		t.Errorf("proven survived %d of %d commits, want all", s.SurvivedCommitCount, commits)
	}
	if len(rep) != 0 {
		t.Errorf("told of replication %+v: the server never acknowledged a commit no standby had", rep)
	}
	standbyDSN, err := server.DSNWithAddr(dsn, standby.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, ctx, directConn(t, standbyDSN), "select count(*) from ledger"); n != commits {
		t.Errorf("the new primary has %d rows, want %d", n, commits)
	}
}

// TestPausedStandbyPromotionReplaysWhatItReceived: PostgreSQL 15 ends a
// standby's paused replay at promotion and first replays every record it
// received, so a paused standby does not lose what the primary streamed to
// it: TestLostCommits cuts the stream instead.
func TestPausedStandbyPromotionReplaysWhatItReceived(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	ctx := testCtxFor(t, 2*time.Minute)
	primary, standby, dsn := syncCommitPair(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table ledger (id text primary key)")
	standbyDSN, err := server.DSNWithAddr(dsn, standby.Addr())
	if err != nil {
		t.Fatal(err)
	}
	waitRows(t, ctx, standbyDSN, "select count(*) from pg_class where relname = 'ledger'", 1)
	standbyAdmin := directConn(t, standby.DSN(""))
	mustExec(t, ctx, standbyAdmin, "select pg_wal_replay_pause()")
	waitRows(t, ctx, standby.DSN(""), "select (pg_get_wal_replay_pause_state() = 'paused')::int", 1)
	mustExec(t, ctx, admin, "insert into ledger values ('streamed while paused')")
	var flushed string
	if err := admin.QueryRow(ctx, "select pg_current_wal_flush_lsn()::text").Scan(&flushed); err != nil {
		t.Fatal(err)
	}
	waitRows(t, ctx, standby.DSN(""), "select (pg_last_wal_receive_lsn() >= '"+flushed+"')::int", 1)
	if n := queryInt(t, ctx, directConn(t, standbyDSN), "select count(*) from ledger"); n != 0 {
		t.Fatalf("the paused standby shows %d rows before its promotion, want none", n)
	}
	crashAndPromote(t, ctx, primary, standby)
	if n := queryInt(t, ctx, directConn(t, standbyDSN), "select count(*) from ledger"); n != 1 {
		t.Errorf("the promoted standby has %d rows, want the one it received while paused", n)
	}
}

// crashAndPromote crashes primary and promotes standby. The old primary comes
// back on its old timeline at cleanup, for the cleanup that drops the test's
// database and role there.
func crashAndPromote(t *testing.T, ctx context.Context, primary, standby *server.Server) {
	t.Helper()
	if err := primary.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := primary.Start(context.Background()); err != nil {
			t.Errorf("restart the old primary: %v", err)
		}
	})
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
}
