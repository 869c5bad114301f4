package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/replica"
)

type breakerEvents struct {
	ch chan pgtx.TraceBreakerStateChangeData
}

func (e *breakerEvents) TraceBreakerStateChange(_ context.Context, d pgtx.TraceBreakerStateChangeData) {
	select {
	case e.ch <- d:
	default:
	}
}

// TestReplicaBreakerFallback: a replica (the same server behind the fault
// proxy) becomes slow — 2s of latency on every message. Reads time out on it
// and the breaker opens after its threshold; reads are then served by the
// primary at once (p99 under 50ms). When the latency goes away, a half-open
// probe reaches the replica and closes the breaker.
func TestReplicaBreakerFallback(t *testing.T) {
	ctx := testCtx(t)
	direct, proxy, through := proxied(t)
	admin := directConn(t, direct)
	mustExec(t, ctx, admin, "create table items (id int primary key, name text not null)")
	mustExec(t, ctx, admin, "insert into items select g, 'item ' || g from generate_series(1, 100) g")

	events := &breakerEvents{ch: make(chan pgtx.TraceBreakerStateChangeData, 16)}
	primary := newPool(t, direct, nil)
	replicaPool := newPool(t, through, func(c *pgtx.Config) {
		c.CancelGrace = 100 * time.Millisecond // a read that falls back must not wait for the replica's cancel
		c.AcquireTimeout = 300 * time.Millisecond
		c.Breaker = &pgtx.BreakerConfig{
			Name:                "replica",
			ConsecutiveFailures: 3,
			SlowCallThreshold:   200 * time.Millisecond,
			MinCalls:            5,
			OpenFor:             time.Second,
			Tracer:              events,
		}
	})
	router, err := replica.New(primary, []*pgtx.Pool{replicaPool}, &replica.Config{ReplicaTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	read := func() (time.Duration, error) {
		start := time.Now()
		err := router.Read(ctx, func(ctx context.Context, tx pgx.Tx) error {
			var name string
			return tx.QueryRow(ctx, "select name from items where id = 42").Scan(&name)
		})
		return time.Since(start), err
	}
	// Healthy: the replica serves.
	for range 5 {
		if _, err := read(); err != nil {
			t.Fatal(err)
		}
	}
	if s := router.Stats(); s.ReplicaReadCount != 5 || s.FallbackCount != 0 {
		t.Fatalf("healthy: %+v, want 5 replica reads", s)
	}

	proxy.SetLatency(2 * time.Second)
	for i := 0; replicaPool.Stats().Breaker.State != pgtx.BreakerOpen; i++ {
		if i == 10 {
			t.Fatalf("the breaker did not open after %d slow reads: %+v", i, replicaPool.Stats().Breaker)
		}
		if _, err := read(); err != nil {
			t.Fatalf("a read must fall back to the primary, not fail: %v", err)
		}
	}
	if ev := <-events.ch; ev.To != pgtx.BreakerOpen {
		t.Fatalf("first event %+v, want open", ev)
	}

	// Open: the primary serves at once.
	var lat []time.Duration
	rejectedBefore := replicaPool.Stats().Breaker.RejectedCount
	for range 50 {
		d, err := read()
		if err != nil {
			t.Fatal(err)
		}
		lat = append(lat, d)
	}
	p99 := percentile(lat, 0.99)
	t.Logf("breaker open: 50 reads from the primary, p50 %v p99 %v", percentile(lat, 0.5), p99)
	if p99 >= 50*time.Millisecond {
		t.Errorf("p99 %v with the breaker open, want < 50ms", p99)
	}
	if s := replicaPool.Stats().Breaker; s.RejectedCount != rejectedBefore || s.State != pgtx.BreakerOpen {
		t.Errorf("breaker %+v: the router must skip an open replica without sending it anything", s)
	}

	// Recovery: latency gone, OpenFor passes, a probe closes the breaker.
	proxy.SetLatency(0)
	for deadline := time.Now().Add(5 * time.Second); replicaPool.Stats().Breaker.State == pgtx.BreakerOpen; {
		if time.Now().After(deadline) {
			t.Fatal("the breaker never became half-open")
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := router.Stats().ReplicaReadCount
	if _, err := read(); err != nil {
		t.Fatal(err)
	}
	if st := replicaPool.Stats().Breaker.State; st != pgtx.BreakerClosed {
		t.Fatalf("after the probe the breaker is %v, want closed", st)
	}
	for _, want := range []pgtx.BreakerState{pgtx.BreakerHalfOpen, pgtx.BreakerClosed} {
		if ev := <-events.ch; ev.To != want {
			t.Errorf("event %+v, want %v", ev, want)
		}
	}
	if router.Stats().ReplicaReadCount != before+1 {
		t.Errorf("the probe read was not served by the replica: %+v", router.Stats())
	}
}

// TestReplicaRouterNoFallbackOnCallerErrors: the caller's own errors and the
// query's errors come back as they are; the primary is not asked.
func TestReplicaRouterNoFallbackOnCallerErrors(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	primary := newPool(t, dsn, nil)
	replicaPool := newPool(t, dsn, func(c *pgtx.Config) { c.Breaker = &pgtx.BreakerConfig{} })
	router, err := replica.New(primary, []*pgtx.Pool{replicaPool}, nil)
	if err != nil {
		t.Fatal(err)
	}
	notFound := errors.New("not found")
	if err := router.Read(ctx, func(context.Context, pgx.Tx) error { return notFound }); !errors.Is(err, notFound) {
		t.Fatalf("err = %v", err)
	}
	err = router.Read(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "select * from missing")
		return err
	})
	if sqlState(err) != "42P01" {
		t.Fatalf("err = %v", err)
	}
	err = router.Read(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "create table t (id int)")
		return err
	})
	if sqlState(err) != "25006" {
		t.Errorf("a write through the router must fail read-only: %v", err)
	}
	if s := router.Stats(); s.FallbackCount != 0 {
		t.Errorf("stats %+v: no fallback for the caller's errors", s)
	}
	if _, err := replica.New(nil, nil, nil); !errors.Is(err, pgtx.ErrInvalidArgument) {
		t.Errorf("nil primary: err = %v", err)
	}
}

// TestReplicaRouterRetargetOnOverload: with retargeting on, a read a replica
// refuses for overload goes to the next replica, not the primary.
func TestReplicaRouterRetargetOnOverload(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	mustExec(t, ctx, directConn(t, dsn), `create function shed() returns int language plpgsql as $$
		begin
			if current_setting('application_name') = 'overloaded' then
				raise exception 'busy' using errcode = '53300';
			end if;
			return 1;
		end $$`)
	primary := newPool(t, dsn, nil)
	overloaded := newPool(t, dsn+"&application_name=overloaded", nil)
	healthy := newPool(t, dsn+"&application_name=healthy", nil)
	for _, retarget := range []bool{true, false} {
		router, err := replica.New(primary, []*pgtx.Pool{overloaded, healthy}, &replica.Config{RetargetOnOverload: retarget})
		if err != nil {
			t.Fatal(err)
		}
		for range 4 {
			err := router.Read(ctx, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "select shed()")
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		s := router.Stats()
		t.Logf("retarget %v: %+v", retarget, s)
		if retarget && (s.RetargetCount != 2 || s.FallbackCount != 0 || s.ReplicaReadCount != 4) {
			t.Errorf("retargeting on: %+v, want 2 retargets, 4 replica reads, no fallback", s)
		}
		if !retarget && (s.RetargetCount != 0 || s.FallbackCount != 2) {
			t.Errorf("retargeting off: %+v, want the overloaded replica's reads on the primary", s)
		}
	}
}
