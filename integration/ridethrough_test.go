package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
)

// Bounds of the ride-through tests: an outage of outageFor, calls with
// rideDeadline each, and how soon after the server is back every call must
// have ended (backWithin: one second, with room for the connect on a
// loaded machine).
const (
	outageFor    = 3 * time.Second
	rideDeadline = 10 * time.Second
	backWithin   = 1500 * time.Millisecond
)

// outages are the ways a server cannot take connections for a while, made
// with the fault proxy: it refuses them (a server restarting, or a node
// gone), or answers FATAL 57P03 (a server starting up, in crash recovery or
// shutting down). In both, the live sessions end first, as the server's own
// end would end them.
var outages = []struct {
	name string
	set  func(p *faultproxy.Proxy, on bool)
}{
	{"connections refused", func(p *faultproxy.Proxy, on bool) { p.RefuseNew(on) }},
	{"FATAL 57P03", func(p *faultproxy.Proxy, on bool) {
		if on {
			p.RejectNew("57P03")
		} else {
			p.RejectNew("")
		}
	}},
}

// outage ends the proxy's live sessions and keeps new connections out for
// outageFor, from a goroutine the test waits for; it returns when the
// outage began and a channel that yields when it ended.
func outage(t *testing.T, p *faultproxy.Proxy, set func(*faultproxy.Proxy, bool)) (began time.Time, ended <-chan time.Time) {
	t.Helper()
	set(p, true)
	p.CutAll()
	began = time.Now()
	done := make(chan time.Time, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(outageFor)
		set(p, false)
		done <- time.Now()
	})
	t.Cleanup(wg.Wait)
	return began, done
}

// TestQuietPoolRidesOutAnOutage: a pool with little traffic (MaxConns 4, one
// success) meets an outage of 3s, and 8 Transaction calls start 100ms apart
// with 10s deadlines. Every call commits once, none before the server is
// back, and each within a second of it: the retry budget, whose floor is all
// a quiet pool has, paces the retries of an unreachable server and never
// ends a call; 57P03 is the server's lifecycle, ridden out as a refusal, not
// an overload capped at MaxAdaptiveRetries.
func TestQuietPoolRidesOutAnOutage(t *testing.T) {
	for _, o := range outages {
		t.Run(o.name, func(t *testing.T) {
			ctx := testCtxFor(t, time.Minute)
			direct, proxy, through := proxied(t)
			mustExec(t, ctx, directConn(t, direct), "create table ledger (id text primary key)")
			pool := newPool(t, through, func(c *pgtx.Config) { c.MaxConns = 4 })
			insert := func(ctx context.Context, id string) error {
				return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "insert into ledger values ($1)", id)
					return err
				})
			}
			if err := insert(ctx, "before"); err != nil {
				t.Fatal(err)
			}
			_, ended := outage(t, proxy, o.set)
			ends, errs := rideCalls(ctx, 8, func(ctx context.Context, i int) error { return insert(ctx, fmt.Sprint(i)) })
			back := <-ended
			checkRidden(t, back, ends, errs)
			if n := queryInt(t, ctx, directConn(t, direct), "select count(*) from ledger"); n != 9 {
				t.Errorf("ledger rows = %d, want 9: each call commits once", n)
			}
		})
	}
}

// TestPlainStatementsRideOutAnOutage: during an outage of 3s, each query
// method of the pool (Exec, Query, QueryRow, SendBatch, CopyFrom) called
// with a 10s deadline waits for the server and succeeds once it is back,
// within a second: nothing had been sent while no connection could be
// made.
func TestPlainStatementsRideOutAnOutage(t *testing.T) {
	for _, o := range outages {
		t.Run(o.name, func(t *testing.T) {
			ctx := testCtxFor(t, time.Minute)
			direct, proxy, through := proxied(t)
			mustExec(t, ctx, directConn(t, direct), "create table sink (v int)")
			// No connection is made before the outage: a statement sent on
			// a connection the outage ended is not sent again (it may have
			// reached the server), which this test is not about.
			pool := newPool(t, through, func(c *pgtx.Config) { c.MaxConns = 4 })
			methods := poolMethods(pool)
			_, ended := outage(t, proxy, o.set)
			ends, errs := rideCalls(ctx, len(methods), func(ctx context.Context, i int) error { return methods[i].run(ctx) })
			back := <-ended
			for i, m := range methods {
				if errs[i] != nil {
					t.Errorf("%s: %v", m.name, errs[i])
				}
			}
			checkRidden(t, back, ends, errs)
			if n := queryInt(t, ctx, directConn(t, direct), "select count(*) from sink"); n != len(methods) {
				t.Errorf("rows = %d, want %d: each statement ran once", n, len(methods))
			}
		})
	}
}

// namedCall is a call a test makes, by name.
type namedCall struct {
	name string
	run  func(ctx context.Context) error
}

// poolMethods are calls of each query method of pool (Exec, Query,
// QueryRow, SendBatch, CopyFrom), each inserting one row (1 to 5) into a
// table sink (v int).
func poolMethods(pool *pgtx.Pool) []namedCall {
	return []namedCall{
		{"Exec", func(ctx context.Context) error { _, err := pool.Exec(ctx, "insert into sink values (1)"); return err }},
		{"Query", func(ctx context.Context) error {
			rows, err := pool.Query(ctx, "insert into sink values (2) returning v")
			if err != nil {
				return err
			}
			_, err = pgx.CollectRows(rows, pgx.RowTo[int32])
			return err
		}},
		{"QueryRow", func(ctx context.Context) error {
			var v int32
			return pool.QueryRow(ctx, "insert into sink values (3) returning v").Scan(&v)
		}},
		{"SendBatch", func(ctx context.Context) error {
			b := &pgx.Batch{}
			b.Queue("insert into sink values (4)")
			return pool.SendBatch(ctx, b).Close()
		}},
		{"CopyFrom", func(ctx context.Context) error {
			_, err := pool.CopyFrom(ctx, pgx.Identifier{"sink"}, []string{"v"}, pgx.CopyFromRows([][]any{{5}}))
			return err
		}},
	}
}

// rideCalls starts n calls 100ms apart, each with a deadline of
// rideDeadline, and returns when each ended and its error.
func rideCalls(ctx context.Context, n int, call func(ctx context.Context, i int) error) ([]time.Time, []error) {
	ends, errs := make([]time.Time, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, rideDeadline)
			defer cancel()
			errs[i] = call(cctx, i)
			ends[i] = time.Now()
		})
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	return ends, errs
}

// checkRidden fails the test for every call that failed, ended before the
// server was back (at back), or ended more than backWithin after it.
func checkRidden(t *testing.T, back time.Time, ends []time.Time, errs []error) {
	t.Helper()
	var latest time.Duration
	for i, err := range errs {
		after := ends[i].Sub(back)
		latest = max(latest, after)
		switch {
		case err != nil:
			t.Errorf("call %d failed %v after the server was back: %v", i, after.Round(time.Millisecond), err)
		case after < 0:
			t.Errorf("call %d succeeded %v before the server was back: the outage did not reach it", i, (-after).Round(time.Millisecond))
		case after > backWithin:
			t.Errorf("call %d succeeded %v after the server was back, want within %v", i, after.Round(time.Millisecond), backWithin)
		}
	}
	t.Logf("%d calls; the last ended %v after the server was back", len(errs), latest.Round(time.Millisecond))
}
