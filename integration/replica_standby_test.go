package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
	"github.com/pgtx-go/pgtx/replica"
)

// waitReplicated waits until the table items, created on the primary, can be read
// on the standby at dsn: the database itself arrives by replication too.
func waitReplicated(t *testing.T, ctx context.Context, dsn string, rows int) {
	t.Helper()
	var last error
	for deadline := time.Now().Add(30 * time.Second); ; {
		last = func() error {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			var n int
			if err := conn.QueryRow(ctx, "select count(*) from items").Scan(&n); err != nil {
				return err
			}
			if n != rows {
				return errors.New("rows not replicated yet")
			}
			return nil
		}()
		if last == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("the standby never had the %d rows of items: %v", rows, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReplicaRouterStandby: a ReplicaRouter over a real streaming standby. Reads
// run on the standby (in recovery). When the standby crashes, every read is
// still served, by the primary, and the standby's breaker opens. When the
// standby is back, the breaker lets a probe through once OpenFor has passed,
// and reads return to the standby.
func TestReplicaRouterStandby(t *testing.T) {
	ctx := testCtx(t)
	primarySrv := server.New(t, nil)
	standbySrv := server.NewStandby(t, primarySrv)
	dsn := pgtxtest.NewDatabase(t, pgtxtest.WithServer(primarySrv))
	standbyDSN, err := server.DSNWithAddr(dsn, standbySrv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table items (id int primary key, name text not null)")
	mustExec(t, ctx, admin, "insert into items select g, 'item ' || g from generate_series(1, 100) g")
	waitReplicated(t, ctx, standbyDSN, 100)

	const openFor = time.Second
	primary := newPool(t, dsn, nil)
	replicaPool := newPool(t, standbyDSN, func(c *pgtx.Config) {
		c.CancelGrace = 100 * time.Millisecond // a read that falls back must not wait for the replica's cancel
		c.Breaker = &pgtx.BreakerConfig{Name: "standby", ConsecutiveFailures: 3, MinCalls: 5, OpenFor: openFor}
	})
	router, err := replica.New(primary, []*pgtx.Pool{replicaPool}, &replica.Config{ReplicaTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// read reports whether the server that served the read is in recovery:
	// true on the standby, false on the primary.
	read := func() (standby bool, err error) {
		err = router.Read(ctx, func(ctx context.Context, tx pgx.Tx) error {
			var name string
			return tx.QueryRow(ctx, "select pg_is_in_recovery(), name from items where id = 42").Scan(&standby, &name)
		})
		return standby, err
	}

	// (a) Healthy: the standby serves every read.
	for i := range 10 {
		onStandby, err := read()
		if err != nil {
			t.Fatal(err)
		}
		if !onStandby {
			t.Fatalf("healthy read %d ran where pg_is_in_recovery() is false: the primary", i)
		}
	}
	if s := router.Stats(); s.ReplicaReadCount != 10 || s.FallbackCount != 0 {
		t.Fatalf("healthy: %+v, want 10 replica reads and no fallback", s)
	}

	// (b) The standby crashes: reads are served by the primary, none fails,
	// and the breaker opens.
	if err := standbySrv.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	readErrors := 0
	for i := 0; replicaPool.Stats().Breaker.State != pgtx.BreakerOpen; i++ {
		if i == 20 {
			t.Fatalf("the breaker did not open after %d reads with the standby down: %+v", i, replicaPool.Stats().Breaker)
		}
		onStandby, err := read()
		if err != nil {
			readErrors++
			t.Errorf("read %d with the standby down failed, want it served by the primary: %v", i, err)
		} else if onStandby {
			t.Errorf("read %d with the standby down ran in recovery", i)
		}
	}
	opened := replicaPool.Stats().Breaker
	if opened.OpenedCount != 1 {
		t.Errorf("breaker %+v: want opened once", opened)
	}
	fallbacks := router.Stats().FallbackCount
	for range 20 {
		onStandby, err := read()
		if err != nil {
			readErrors++
			t.Errorf("read with the breaker open: %v", err)
		} else if onStandby {
			t.Error("a read with the breaker open ran in recovery")
		}
	}
	s := router.Stats()
	t.Logf("standby down: router %+v, breaker %+v, read errors %d", s, replicaPool.Stats().Breaker, readErrors)
	if s.FallbackCount != fallbacks+20 || s.ReplicaReadCount != 10 {
		t.Errorf("router %+v: want the 20 reads with the breaker open served by the primary (fallbacks %d before)", s, fallbacks)
	}
	if b := replicaPool.Stats().Breaker; b.RejectedCount != opened.RejectedCount {
		t.Errorf("breaker %+v: the router must skip an open breaker without asking it", b)
	}

	// (c) The standby is back: once OpenFor has passed, a probe reaches it,
	// the breaker closes, and reads run on the standby again.
	restarted := time.Now()
	if err := standbySrv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		onStandby, err := read()
		if err != nil {
			readErrors++
			t.Errorf("read while the standby comes back: %v", err)
		}
		if onStandby {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reads never returned to the standby: router %+v, breaker %+v", router.Stats(), replicaPool.Stats().Breaker)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("reads back on the standby %v after Start", time.Since(restarted).Round(time.Millisecond))
	if st := replicaPool.Stats().Breaker.State; st != pgtx.BreakerClosed {
		t.Errorf("breaker %v after a read on the standby, want closed", st)
	}
	before := router.Stats()
	for i := range 10 {
		onStandby, err := read()
		if err != nil {
			t.Fatal(err)
		}
		if !onStandby {
			t.Errorf("read %d after recovery ran on the primary", i)
		}
	}
	if s := router.Stats(); s.ReplicaReadCount != before.ReplicaReadCount+10 || s.FallbackCount != before.FallbackCount {
		t.Errorf("after recovery: %+v, want 10 more replica reads than %+v and no fallback", s, before)
	}
	if readErrors != 0 {
		t.Errorf("%d reads failed; the router must serve every read", readErrors)
	}
}
