package contention

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"
)

// TestLimitFindsTheBestConcurrency drives the gate with scripted
// workloads whose best concurrency is known, and checks the limit settles
// there: the manager engages on conflicts, then probes limits up and down
// and keeps the one that commits most.
func TestLimitFindsTheBestConcurrency(t *testing.T) {
	// slower makes an attempt 1ms plus step for each one running with it;
	// losing makes it conflict with odds 1-keep^(others running).
	slower := func(step time.Duration) func(int) time.Duration {
		return func(c int) time.Duration { return time.Millisecond + time.Duration(c)*step }
	}
	losing := func(keep float64) func(int) float64 {
		return func(c int) float64 { return 1 - math.Pow(keep, float64(c-1)) }
	}
	// Hot rows: every further transaction running conflicts with 40% odds;
	// the best is 2 at once (10% above 1).
	hot := workload{duration: slower(100 * time.Microsecond), conflict: losing(0.6)}
	tests := []struct {
		name             string
		callers          int
		w                workload
		wantLo, wantHigh int
	}{
		{name: "hot rows, 8 callers", callers: 8, w: hot, wantLo: 2, wantHigh: 2},
		// The same rows with 128 callers: the gate starts far above the
		// best and must come down to it.
		{name: "hot rows, 128 callers", callers: 128, w: hot, wantLo: 2, wantHigh: 2},
		{
			// Rows updated in random order: two at once may deadlock, and
			// a deadlock costs 100ms, so one at a time commits most
			// although most attempts at two are quick.
			name: "deadlocks, 8 callers", callers: 8,
			w: workload{duration: slower(100 * time.Microsecond), conflict: losing(0.8),
				deadlock: func(c int) float64 { return 0.05 * float64(c-1) }},
			wantLo: 1, wantHigh: 1,
		},
		// Warm rows: conflicts rise slowly, the best is 7 or 8 at once.
		{name: "warm rows, 32 callers", callers: 32, w: workload{duration: slower(50 * time.Microsecond), conflict: losing(0.9)}, wantLo: 5, wantHigh: 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, clk, tr := newTestGate(t, tt.callers)
			limits := simulate(t, g, clk, tt.w, tt.callers, 20000)
			if len(tr.events) == 0 || !tr.events[0].Limiting || tr.events[0].Previous != 0 {
				t.Fatalf("first event %+v, want the gate to start limiting", tr.events)
			}
			got := mode(limits)
			if got < tt.wantLo || got > tt.wantHigh {
				t.Errorf("limit in the second half mostly %d, want %d to %d (goodput of the model: %s)",
					got, tt.wantLo, tt.wantHigh, goodputs(tt.w, tt.callers))
			}
			s := g.stats()
			if !s.Limiting || s.Limit != g.limit || s.Attempts != 20000 || s.Commits+s.Conflicts != 20000 {
				t.Errorf("stats %+v do not add up", s)
			}
		})
	}
}

// TestGateStaysOpenWithoutConflicts: conflicts at or below the
// threshold never engage the gate, and the open gate allocates nothing.
func TestGateStaysOpenWithoutConflicts(t *testing.T) {
	g, clk, tr := newTestGate(t, 8)
	w := workload{
		duration: func(int) time.Duration { return time.Millisecond },
		conflict: func(int) float64 { return 0.1 }, // the threshold itself
	}
	limits := simulate(t, g, clk, w, 8, 5000)
	if g.limiting.Load() || len(tr.events) != 0 || mode(limits) != 0 {
		t.Fatalf("gate limiting %v after conflicts at the threshold (events %+v)", g.limiting.Load(), tr.events)
	}
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() {
		adm, _ := g.Admit(ctx, 0, 0)
		g.Done(ctx, adm, Committed, time.Millisecond)
	}); n != 0 {
		t.Errorf("an attempt through the open gate allocates %v times, want 0", n)
	}
}

// TestGateOpensWhenCalm: once the limit is no longer reached and
// conflicts have fallen, the gate opens and says so.
func TestGateOpensWhenCalm(t *testing.T) {
	g, clk, tr := newTestGate(t, 8)
	hot := workload{
		duration: func(int) time.Duration { return time.Millisecond },
		conflict: func(c int) float64 { return 1 - math.Pow(0.6, float64(c-1)) },
	}
	simulate(t, g, clk, hot, 8, 2000)
	if !g.limiting.Load() {
		t.Fatal("the gate is not limiting on hot rows")
	}
	// One caller left, and it never conflicts.
	calm := workload{duration: hot.duration, conflict: func(int) float64 { return 0 }}
	simulate(t, g, clk, calm, 1, 3*window)
	if g.limiting.Load() {
		t.Fatalf("the gate still limits (limit %d) with one caller and no conflicts", g.limit)
	}
	last := tr.events[len(tr.events)-1]
	if last.Limiting || last.Limit != 0 || last.Previous == 0 {
		t.Errorf("last event %+v, want the gate opening", last)
	}
}

// TestGateClimbsBackWhenRowsCool: a gate engaged on rows that then
// stop conflicting (or that were never hot: a chance burst) climbs back to
// the pool's size and opens, although every caller is waiting.
func TestGateClimbsBackWhenRowsCool(t *testing.T) {
	for _, start := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("from %d", start), func(t *testing.T) {
			g, clk, tr := newTestGate(t, 8)
			engage(g, start)
			cool := workload{
				// A saturated server: more at once commit no more, and
				// no less, so only the lack of conflicts says the gate
				// is not needed.
				duration: func(c int) time.Duration { return time.Duration(c) * time.Millisecond },
				conflict: func(int) float64 { return 0.01 },
				noise:    0.5, // lock waits, a neighbour's burst
			}
			simulate(t, g, clk, cool, 8, 40*window)
			if g.limiting.Load() {
				t.Fatalf("still limiting at %d after %d attempts without conflicts (events %+v)", g.limit, 40*window, tr.events)
			}
		})
	}
}
