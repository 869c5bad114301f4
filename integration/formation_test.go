package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/formation"
)

// Bounds of the formation workload (TestFormationResolve).
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
	fault func(ctx context.Context, f *formation.Formation) error
	// back returns once the formation serves writes again as it will stay.
	back func(ctx context.Context, f *formation.Formation, before formation.Node) error
}{
	{"planned switchover", func(ctx context.Context, f *formation.Formation) error { return f.Failover(ctx) },
		func(ctx context.Context, f *formation.Formation, before formation.Node) error {
			_, err := f.WaitState(ctx, map[string]string{before.Name: "secondary", other(before.Name): "primary"})
			return err
		}},
	{"kill -9 of the primary's postmaster", func(ctx context.Context, f *formation.Formation) error {
		_, err := f.KillPrimary(ctx)
		return err
	}, func(ctx context.Context, f *formation.Formation, before formation.Node) error {
		// The keeper restarts it in place, or the monitor fails over
		// first: either way, a primary (a new postmaster) and a secondary
		// again.
		return waitNewPrimary(ctx, f, before)
	}},
	{"fast restart of the primary's postmaster (57P03)", func(ctx context.Context, f *formation.Formation) error {
		_, err := f.RestartPrimary(ctx)
		return err
	}, func(ctx context.Context, f *formation.Formation, before formation.Node) error {
		return waitNewPrimary(ctx, f, before)
	}},
	{"primary node stopped", func(ctx context.Context, f *formation.Formation) error {
		_, err := f.StopPrimary(ctx)
		return err
	}, func(ctx context.Context, f *formation.Formation, before formation.Node) error {
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
func waitNewPrimary(ctx context.Context, f *formation.Formation, before formation.Node) error {
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
func waitSteady(ctx context.Context, f *formation.Formation) (formation.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var (
		since   time.Time
		primary formation.Node
		nodes   []formation.Node
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
			return formation.Node{}, fmt.Errorf("the formation did not settle on a primary and a secondary: %v (last: %+v, %v)", ctx.Err(), nodes, err)
		case <-tick.C:
		}
	}
}

// formationTransition is the time from the formation's first event after
// the fault to its last, and how many there were.
func formationTransition(t *testing.T, ctx context.Context, f *formation.Formation, faultAt time.Time) (time.Duration, int) {
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
