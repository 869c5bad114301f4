package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pgtx-go/pgtx"
)

// phaseStats summarises the reads of one phase.
type phaseStats struct {
	reads, onReplica, onPrimary, failed int
	durs                                []time.Duration
}

// byPhase groups the reads by the phase they started in, each phase's
// durations sorted.
func (d *demo) byPhase() [numPhases]phaseStats {
	var ps [numPhases]phaseStats
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.samples {
		p := &ps[s.phase]
		p.reads++
		switch {
		case s.err != nil:
			p.failed++
		case s.server == "replica":
			p.onReplica++
		default:
			p.onPrimary++
		}
		p.durs = append(p.durs, s.dur)
	}
	for i := range ps {
		slices.Sort(ps[i].durs)
	}
	return ps
}

// report prints the reads of each phase, and the router's and the
// breaker's counts.
func (d *demo) report() {
	fmt.Println()
	fmt.Printf("%-14s %7s %9s %9s %7s %10s %10s %10s\n", "phase", "reads", "replica", "primary", "failed", "p50", "p99", "max")
	for i, p := range d.byPhase() {
		if p.reads == 0 {
			continue
		}
		fmt.Printf("%-14s %7d %9d %9d %7d %10v %10v %10v\n", phaseNames[i], p.reads, p.onReplica, p.onPrimary, p.failed,
			percentile(p.durs, 0.5), percentile(p.durs, 0.99), p.durs[len(p.durs)-1].Round(10*time.Microsecond))
	}
	rs := d.router.Stats()
	bs := d.replica.Stats().Breaker
	fmt.Printf("\nrouter.Stats()   replica reads %d, fallbacks to the primary %d\n", rs.ReplicaReadCount, rs.FallbackCount)
	fmt.Printf("replica breaker  %v, opened %d times, %d calls refused while open\n", bs.State, bs.OpenedCount, bs.RejectedCount)
}

// explain says what each phase showed; it is printed once check passed.
func explain() {
	fmt.Println()
	fmt.Println("slow:          the reads that met the slow replica waited for ReplicaTimeout before the primary")
	fmt.Println("               served them; after 3 of them the breaker opened.")
	fmt.Println("breaker open:  the router skips the replica without sending it anything and the primary answers")
	fmt.Println("               at once; the slowest reads are the half-open probes (every OpenFor, one read tries")
	fmt.Println("               the replica again, waits for ReplicaTimeout and reopens the breaker).")
	fmt.Println("recovered:     the first probe sent after the latency was removed succeeded and closed the")
	fmt.Println("               breaker; the replica serves the reads again.")
}

// check returns an error when the run did not show the behaviour.
func (d *demo) check() error {
	ps := d.byPhase()
	healthy, open := ps[phaseHealthy], ps[phaseOpen]
	for i, p := range ps {
		if p.failed > 0 {
			return fmt.Errorf("%d reads failed in phase %s: they must fall back to the primary", p.failed, phaseNames[i])
		}
	}
	if healthy.reads == 0 || healthy.onReplica*10 < healthy.reads*9 {
		return fmt.Errorf("healthy: the replica served %d of %d reads, want at least 90%%", healthy.onReplica, healthy.reads)
	}
	if open.reads == 0 {
		return errors.New("the breaker never opened while the replica was slow")
	}
	if p50 := percentile(open.durs, 0.5); p50 >= 50*time.Millisecond {
		return fmt.Errorf("breaker open: p50 %v, want < 50ms from the primary", p50)
	}
	if open.onPrimary*10 < open.reads*9 {
		return fmt.Errorf("breaker open: the primary served %d of %d reads, want at least 90%%", open.onPrimary, open.reads)
	}
	closedAt, ok := d.closedDuringRecovery()
	if !ok {
		return errors.New("the breaker did not close after the latency was removed")
	}
	var after, onReplica int
	d.mu.Lock()
	for _, s := range d.samples {
		if s.phase == phaseRecovered && s.start.After(closedAt) {
			after++
			if s.server == "replica" {
				onReplica++
			}
		}
	}
	d.mu.Unlock()
	if after == 0 || onReplica*10 < after*9 {
		return fmt.Errorf("recovered: the replica served %d of the %d reads after the breaker closed, want at least 90%%", onReplica, after)
	}
	if st := d.replica.Stats().Breaker.State; st != pgtx.BreakerClosed {
		return fmt.Errorf("the breaker ended %v, want closed", st)
	}
	return nil
}

// closedDuringRecovery returns when the breaker last closed in the
// recovered phase.
func (d *demo) closedDuringRecovery() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := len(d.events) - 1; i >= 0; i-- {
		if e := d.events[i]; e.phase == phaseRecovered && e.data.To == pgtx.BreakerClosed {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// percentile returns the q-quantile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))].Round(10 * time.Microsecond)
}
