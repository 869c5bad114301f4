package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest"
)

// Bounds of TestFormationLedger.
const (
	formationWriters = 8
	formationBefore  = 2 * time.Second // of writes before the fault
	formationAfter   = 2 * time.Second // of writes once the formation is back
	// formationLate bounds how long after the server takes writes again
	// the first call succeeds: a second, and room for a loaded machine.
	formationLate = 1500 * time.Millisecond
)

// formationFaults are the transitions of a pg_auto_failover formation the
// ledger goes through, each with the states it ends in.
var formationFaults = []struct {
	name  string
	fault func(ctx context.Context, f *pgtxtest.Formation) error
	// back returns once the formation serves writes again as it will stay.
	back func(ctx context.Context, f *pgtxtest.Formation, before pgtxtest.FormationNode) error
}{
	{"planned switchover", func(ctx context.Context, f *pgtxtest.Formation) error { return f.Failover(ctx) },
		func(ctx context.Context, f *pgtxtest.Formation, before pgtxtest.FormationNode) error {
			_, err := f.WaitState(ctx, map[string]string{before.Name: "secondary", other(before.Name): "primary"})
			return err
		}},
	{"kill -9 of the primary's postmaster", func(ctx context.Context, f *pgtxtest.Formation) error {
		_, err := f.KillPrimary(ctx)
		return err
	}, func(ctx context.Context, f *pgtxtest.Formation, before pgtxtest.FormationNode) error {
		// The keeper restarts it in place, or the monitor fails over
		// first: either way, a primary (a new postmaster) and a secondary
		// again.
		return waitNewPrimary(ctx, f, before)
	}},
	{"fast restart of the primary's postmaster (57P03)", func(ctx context.Context, f *pgtxtest.Formation) error {
		_, err := f.RestartPrimary(ctx)
		return err
	}, func(ctx context.Context, f *pgtxtest.Formation, before pgtxtest.FormationNode) error {
		return waitNewPrimary(ctx, f, before)
	}},
	{"primary node stopped", func(ctx context.Context, f *pgtxtest.Formation) error {
		_, err := f.StopPrimary(ctx)
		return err
	}, func(ctx context.Context, f *pgtxtest.Formation, before pgtxtest.FormationNode) error {
		_, err := f.WaitState(ctx, map[string]string{other(before.Name): "wait_primary"})
		return err
	}},
}

func other(node string) string {
	if node == "node1" {
		return "node2"
	}
	return "node1"
}

// waitNewPrimary waits until one node is primary and the other secondary,
// and the primary is not the postmaster that was before (another node, or
// the same one restarted).
func waitNewPrimary(ctx context.Context, f *pgtxtest.Formation, before pgtxtest.FormationNode) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		nodes, err := f.Nodes(ctx)
		if err == nil && len(nodes) == 2 {
			for i, n := range nodes {
				o := nodes[1-i]
				if n.State == "primary" && n.Goal == "primary" && o.State == "secondary" && o.Goal == "secondary" &&
					n.PID != 0 && (n.Name != before.Name || n.PID != before.PID) {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no new primary and secondary: %v (last: %+v)", ctx.Err(), nodes)
		case <-tick.C:
		}
	}
}

// steadyFor is how long a formation must stay with one primary and one
// secondary to count as steady: longer than the monitor's health checks
// take to start a failover it has decided on.
const steadyFor = 3 * time.Second

// waitSteady waits until one node is primary and the other secondary (each
// reported by its keeper and assigned by the monitor), the same nodes for
// steadyFor, and returns the primary.
func waitSteady(ctx context.Context, f *pgtxtest.Formation) (pgtxtest.FormationNode, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var (
		since   time.Time
		primary pgtxtest.FormationNode
		nodes   []pgtxtest.FormationNode
		err     error
	)
	for {
		nodes, err = f.Nodes(ctx)
		steady := false
		if err == nil && len(nodes) == 2 {
			for i, n := range nodes {
				o := nodes[1-i]
				if n.State == "primary" && n.Goal == "primary" && o.State == "secondary" && o.Goal == "secondary" {
					if since.IsZero() || primary.Name != n.Name || primary.PID != n.PID {
						since, primary = time.Now(), n
					}
					steady = true
				}
			}
		}
		if !steady {
			since = time.Time{}
		} else if time.Since(since) >= steadyFor {
			return primary, nil
		}
		select {
		case <-ctx.Done():
			return pgtxtest.FormationNode{}, fmt.Errorf("the formation did not settle on a primary and a secondary: %v (last: %+v, %v)", ctx.Err(), nodes, err)
		case <-tick.C:
		}
	}
}

// TestFormationLedger drives a ledger workload through a real
// pg_auto_failover formation (a monitor, a primary and its synchronous
// secondary), connecting with the formation's multi-host URI
// (target_session_attrs=read-write), through a planned switchover, a kill
// -9 of the primary's postmaster, a fast shutdown of it (57P03 while it
// stops and starts) and a stopped primary node: eight writers, each write
// a unique id with a 10s deadline, in its own Transaction or, for two of
// them, with Pool.Exec. After each: every write reported committed is in
// the ledger exactly once and nothing is there twice; nothing that failed
// is there (but a plain statement lost after it was sent, which may be);
// ErrCommitUnknown comes only with its reason, in the error and in Stats;
// no call fails before its deadline except on a permanent error; the
// longest gap between successes is set beside the formation's own
// transition time (from its first event after the fault to the last); and
// the first success after it comes within a second or so of the server
// taking writes again, as a probe connecting every 50ms saw it.
func TestFormationLedger(t *testing.T) {
	if testing.Short() {
		t.Skip("starts pg_auto_failover formations")
	}
	// One formation through the three, in turn: each leaves a primary and a
	// secondary for the next (the stopped primary comes last). A formation
	// is three servers and three keepers; starting one per fault would load
	// the machine the other test binaries share three times over.
	f := pgtxtest.StartFormation(t, pgtxtest.FormationOptions{})
	{
		ctx := testCtx(t)
		primary, err := f.Primary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, ctx, directConn(t, primary.DSN), "create table ledger (id text primary key, at timestamptz not null default clock_timestamp())")
	}
	for i, fault := range formationFaults {
		ok := t.Run(fault.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			// The fault before may have set off a transition the monitor
			// finishes later (a keeper restarts a killed primary in place,
			// then the monitor fails over all the same): each fault starts
			// from a primary and a secondary that stay so.
			primary, err := waitSteady(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			prefix := fmt.Sprintf("s%d-", i)
			pool := newPool(t, f.URI(), func(c *pgtx.Config) {
				c.MaxConns = formationWriters
				c.ConnConfig.ConnectTimeout = 2 * time.Second
			})

			probe := startWriteProbe(t, f.URI())
			stop := make(chan struct{})
			results := make([][]ledgerCall, formationWriters)
			var wg sync.WaitGroup
			for w := range formationWriters {
				wg.Go(func() { results[w] = ledgerWriter(ctx, pool, prefix, w, stop) })
			}
			time.Sleep(formationBefore) // writes before the fault: paces load
			faultAt := time.Now()
			if err := fault.fault(ctx, f); err != nil {
				close(stop)
				wg.Wait()
				t.Fatalf("%s: %v", fault.name, err)
			}
			backErr := fault.back(ctx, f, primary)
			backAt := time.Now()
			if backErr == nil {
				time.Sleep(formationAfter) // writes after: paces load
			}
			close(stop)
			wg.Wait()
			if backErr != nil {
				t.Fatalf("the formation did not come back: %v", backErr)
			}
			calls := slices.Concat(results...)
			checkFormationLedger(t, ctx, f, pool, prefix, calls, faultAt, backAt, probe.Stop())
		})
		if !ok {
			return // the formation is in no state for the next fault
		}
	}
}

// checkFormationLedger checks the final primary's ledger (the ids with
// prefix) against the calls and reports the gap between successes beside
// the formation's transition.
func checkFormationLedger(t *testing.T, ctx context.Context, f *pgtxtest.Formation, pool *pgtx.Pool, prefix string, calls []ledgerCall, faultAt, backAt time.Time, probes []probeResult) {
	t.Helper()
	// The monitor may go on after the writers stopped (a primary restarted
	// in place, then failed over all the same): the ledger is read from the
	// primary it settles on.
	primary, err := waitSteady(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	ledger := map[string]int{}
	rows, _ := directConn(t, primary.DSN).Query(ctx, "select id, count(*) from ledger where starts_with(id, $1) group by id", prefix)
	var id string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { ledger[id] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	var (
		committed, unknown, unknownApplied, failed, permanent, byDeadline int
		sentLost, plain                                                   int
		successes                                                         []time.Time
	)
	made := map[string]bool{}
	for _, c := range calls {
		made[c.id] = true
		if c.plain {
			plain++
		}
		switch {
		case c.err == nil:
			committed++
			successes = append(successes, c.end)
			if ledger[c.id] != 1 {
				t.Errorf("LOST: %s was reported committed (fn ran %d times) and is in the ledger %d times", c.id, c.runs, ledger[c.id])
			}
		case errors.Is(c.err, pgtx.ErrCommitUnknown):
			unknown++
			if ledger[c.id] > 0 {
				unknownApplied++
			}
			t.Logf("commit unknown: %s (in the ledger %d times): %v", c.id, ledger[c.id], c.err)
			if !strings.Contains(c.err.Error(), "in flight (") {
				t.Errorf("%s: ErrCommitUnknown without its reason: %v", c.id, c.err)
			}
		case c.plain && pgtx.Classify(c.err) == pgtx.ClassConnectionLost:
			// Sent, then its connection broke: it may have been applied,
			// and is not sent again.
			sentLost++
			if ledger[c.id] > 1 {
				t.Errorf("%s (a plain statement) is in the ledger %d times", c.id, ledger[c.id])
			}
		default:
			failed++
			if ledger[c.id] != 0 {
				t.Errorf("PHANTOM: %s failed but is in the ledger: %v", c.id, c.err)
			}
			switch {
			case pgtx.Classify(c.err) == pgtx.ClassPermanent:
				permanent++
				t.Logf("permanent error: %s: %v", c.id, c.err)
			case c.deadlineHit:
				byDeadline++
				t.Logf("ended by its deadline after %v: %s: %v", c.end.Sub(c.start).Round(time.Millisecond), c.id, c.err)
			default:
				t.Errorf("%s failed %v before its deadline (after %v, fn ran %d times): %v",
					c.id, c.start.Add(ledgerDeadline).Sub(c.end).Round(time.Millisecond), c.end.Sub(c.start).Round(time.Millisecond), c.runs, c.err)
			}
		}
	}
	for id, n := range ledger {
		if !made[id] || n != 1 {
			t.Errorf("the ledger holds %s %d times (made by a call: %v)", id, n, made[id])
		}
	}
	res := pool.Stats().Resolved
	if int64(unknown) != res.UnknownCount {
		t.Errorf("%d calls returned ErrCommitUnknown, Stats().Resolved.UnknownCount = %d", unknown, res.UnknownCount)
	}
	if reasons := res.UnsupportedCount + res.ElsewhereCount + res.RestartedCount + res.ForgottenCount + res.UnansweredCount; reasons != res.UnknownCount {
		t.Errorf("resolutions %+v: the reasons add up to %d, not the %d unknown", res, reasons, res.UnknownCount)
	}
	slices.SortFunc(successes, func(a, b time.Time) int { return a.Compare(b) })
	var gap time.Duration
	var gapFrom, gapTo time.Time
	for i := 1; i < len(successes); i++ {
		if d := successes[i].Sub(successes[i-1]); d > gap {
			gap, gapFrom, gapTo = d, successes[i-1], successes[i]
		}
	}
	// How soon after the server took writes again the calls did: the
	// server's return within the longest gap, as a probe that connects
	// every 50ms saw it.
	if back, ok := serverBack(probes, gapFrom, gapTo); ok {
		late := gapTo.Sub(back)
		t.Logf("the server took writes again %v after the fault; the first success came %v later",
			back.Sub(faultAt).Round(time.Millisecond), late.Round(time.Millisecond))
		if late > formationLate {
			t.Errorf("the first success came %v after the server took writes again, want within %v", late.Round(time.Millisecond), formationLate)
		}
	}
	transition, events := formationTransition(t, ctx, f, faultAt)
	t.Logf("calls %d (%d plain statements): committed %d, unknown %d (%d in fact committed), plain statements lost after they were sent %d, failed %d (permanent %d, by their deadline %d); fn ran again in %d calls",
		len(calls), plain, committed, unknown, unknownApplied, sentLost, failed, permanent, byDeadline, rerun(calls))
	t.Logf("resolutions %+v", res)
	t.Logf("longest gap between successes %v; the formation's transition %v (%d events), back to serving %v after the fault",
		gap.Round(time.Millisecond), transition.Round(time.Millisecond), events, backAt.Sub(faultAt).Round(time.Millisecond))
	if committed == 0 || successes[len(successes)-1].Before(backAt) {
		t.Fatalf("no success after the formation was back: it proves nothing")
	}
	if gap >= ledgerDeadline {
		t.Errorf("successes stopped for %v, longer than a call's deadline", gap)
	}
}

func rerun(calls []ledgerCall) int {
	n := 0
	for _, c := range calls {
		if c.runs > 1 {
			n++
		}
	}
	return n
}

// formationTransition is the time from the formation's first event after
// the fault to its last, and how many there were.
func formationTransition(t *testing.T, ctx context.Context, f *pgtxtest.Formation, faultAt time.Time) (time.Duration, int) {
	t.Helper()
	events, err := f.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var first, last time.Time
	n := 0
	for _, e := range events {
		if e.Time.Before(faultAt) {
			continue
		}
		if n == 0 {
			first = e.Time
		}
		last = e.Time
		n++
	}
	return last.Sub(first), n
}
