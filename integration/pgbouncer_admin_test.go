package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/bouncer"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
	"github.com/pgtx-go/pgtx/replica"
)

// TestBouncerAdminLedger: workers record unique ids through a
// transaction-mode PgBouncer while its admin console runs KILL (with the
// RESUME it needs), PAUSE/RESUME and RECONNECT on the database. Every call
// that succeeded left its id exactly once, every call that failed
// definitively left nothing, an unknown outcome left it at most once:
// nothing lost, nothing doubled.
func TestBouncerAdminLedger(t *testing.T) {
	ctx := testCtx(t)
	direct, through, b := behindBouncer(t, bouncer.Config{DefaultPoolSize: 2})
	admin := directConn(t, direct)
	mustExec(t, ctx, admin, "create table ledger (id text not null)") // no key: a doubled commit must show
	db := admin.Config().Database
	pool := newPool(t, through, func(c *pgtx.Config) { bouncerSettings(c); c.MaxConns = 4 })

	runCtx, stop := context.WithCancel(ctx)
	type result struct {
		id  string
		err error
	}
	results := make(chan result, 100000)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; runCtx.Err() == nil; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := pgtx.Transaction(cctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "insert into ledger values ($1)", id)
					return err
				})
				cancel()
				results <- result{id, err}
			}
		})
	}
	commands := []string{"KILL " + db, "RESUME " + db, "PAUSE " + db, "RESUME " + db, "RECONNECT " + db,
		"KILL " + db, "RESUME " + db, "RECONNECT " + db}
	for _, cmd := range commands {
		<-time.After(250 * time.Millisecond)
		if err := b.Admin(ctx, cmd); err != nil {
			t.Errorf("%s: %v", cmd, err)
		}
	}
	<-time.After(250 * time.Millisecond)
	stop()
	wg.Wait()
	close(results)

	counts := map[string]int{}
	rows, err := admin.Query(ctx, "select id, count(*) from ledger group by id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		counts[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var ok, unknown, failed int
	kinds := map[string]int{}
	for r := range results {
		n := counts[r.id]
		switch {
		case r.err == nil:
			ok++
			if n != 1 {
				t.Errorf("%s committed, found %d times", r.id, n)
			}
		case errors.Is(r.err, pgtx.ErrCommitUnknown):
			unknown++
			if n > 1 {
				t.Errorf("%s (outcome unknown) found %d times", r.id, n)
			}
		default:
			failed++
			kinds[pgtx.Classify(r.err).String()]++
			if n != 0 {
				t.Errorf("%s failed (%v) but was found %d times", r.id, r.err, n)
			}
		}
	}
	t.Logf("%d calls: %d committed, %d unknown, %d failed %v; pool %+v", ok+unknown+failed, ok, unknown, failed, kinds, pool.Stats().Pool.NewConnsCount())
	if ok == 0 {
		t.Error("nothing committed: the test tested nothing")
	}
	if failed != 0 {
		t.Errorf("%d calls failed %v: a connection PgBouncer closed before COMMIT is lost, and the call runs again", failed, kinds)
	}
}

// TestBouncerReplicaFallsBackOnRelayedOverload: a replica behind PgBouncer
// whose server has no connection slot left. PgBouncer relays the server's
// "sorry, too many clients already" as FATAL 08P01; that is overload, and
// the router serves the read from the primary.
func TestBouncerReplicaFallsBackOnRelayedOverload(t *testing.T) {
	ctx := testCtx(t)
	srv := server.New(t, &server.Config{Settings: map[string]string{"max_connections": "5", "superuser_reserved_connections": "0"}})
	setup := directConn(t, srv.DSN(""))
	mustExec(t, ctx, setup, "create database replica_db")
	_ = setup.Close(ctx)
	b := bouncer.New(t, srv, &bouncer.Config{})
	logOnFailure(t, b)
	fillSlots(t, ctx, srv.DSN(""))
	tr := &bouncerTracer{}
	replicaPool := newPool(t, b.DSN("replica_db"), func(c *pgtx.Config) { bouncerSettings(c); c.Tracer = tr; c.CancelMode = pgtx.CancelModeProtocol })
	primary := newPool(t, newDB(t), nil)
	router, err := replica.New(primary, []*pgtx.Pool{replicaPool}, &replica.Config{ReplicaTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = router.Read(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var one int
		return tx.QueryRow(ctx, "select 1").Scan(&one)
	})
	classes, _ := tr.snapshot()
	t.Logf("replica attempts %s: %v", classes, tr.msgs)
	if err != nil {
		t.Fatalf("read: %v: a replica refusing for overload must fall back to the primary", err)
	}
	if s := router.Stats(); s.FallbackCount != 1 || s.ReplicaReadCount != 0 {
		t.Errorf("router stats %+v, want one fallback", s)
	}
}

// fillSlots opens connections to dsn until the server refuses one with
// 53300, and keeps them open until the test ends.
func fillSlots(t *testing.T, ctx context.Context, dsn string) {
	t.Helper()
	for range 100 {
		c, err := pgx.Connect(ctx, dsn)
		if sqlState(err) == pgerrcode.TooManyConnections {
			return
		}
		if err != nil {
			t.Fatalf("fill the server's connection slots: %v", err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
	}
	t.Fatal("the server took 100 connections: max_connections is not applied")
}
