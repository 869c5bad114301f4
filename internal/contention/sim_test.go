package contention

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

// workload is a scripted contention model: attempts admitted at
// concurrency c take duration(c) and conflict with probability
// conflict(c), drawn deterministically (a conflict each time the running
// sum of the probability crosses an integer).
type workload struct {
	duration func(c int) time.Duration
	conflict func(c int) float64
	// noise, when set, scales each attempt's duration by a factor drawn
	// uniformly from [1-noise, 1+noise], from a fixed seed.
	noise float64
	// deadlock, when set, is the share of the attempts admitted at
	// concurrency c that wait 100ms (a deadlock_timeout) and then fail
	// with a conflict.
	deadlock func(c int) float64
}

// goodput is the model's commits per second at a concurrency of c.
func (w workload) goodput(c int) float64 {
	return float64(c) * (1 - w.conflict(c)) / w.duration(c).Seconds()
}

// simulate runs callers closed-loop callers through g on clk for n
// attempts, as a discrete-event simulation: an attempt is admitted only
// when the gate would admit it at once, so nothing blocks. It returns the
// limit in force after each attempt (0 while the gate was open).
func simulate(t *testing.T, g *Gate, clk *fakeClock, w workload, callers, n int) []int {
	t.Helper()
	type running struct {
		end     time.Time
		adm     Admission
		c       int
		d       time.Duration
		stalled bool
	}
	var (
		inFlight []running
		limits   []int
		acc      float64
		idle     = callers
		rng      = rand.New(rand.NewPCG(1, 2))
		stalls   float64
	)
	ctx := context.Background()
	for done := 0; done < n; {
		for idle > 0 {
			g.mu.Lock()
			full := g.limiting.Load() && g.running >= g.limit
			if full {
				// The caller would wait at the gate: the gate sees that.
				g.win.waited = true
			}
			g.mu.Unlock()
			if full {
				break
			}
			adm, err := g.Admit(ctx, 0, 0)
			if err != nil {
				t.Fatalf("admit: %v", err)
			}
			idle--
			c := len(inFlight) + 1
			d := w.duration(c)
			if w.noise > 0 {
				d = time.Duration(float64(d) * (1 + w.noise*(2*rng.Float64()-1)))
			}
			stalled := false
			if w.deadlock != nil {
				if stalls += w.deadlock(c); stalls >= 1 {
					stalls--
					d, stalled = 100*time.Millisecond, true
				}
			}
			inFlight = append(inFlight, running{end: clk.now.Add(d), adm: adm, c: c, d: d, stalled: stalled})
		}
		sort.Slice(inFlight, func(i, j int) bool { return inFlight[i].end.Before(inFlight[j].end) })
		r := inFlight[0]
		inFlight = inFlight[1:]
		clk.now = r.end
		o := Committed
		acc += w.conflict(r.c)
		if acc >= 1 {
			acc--
			o = Conflict
		}
		if r.stalled {
			o = Conflict
		}
		g.Done(ctx, r.adm, o, r.d)
		idle++
		done++
		limits = append(limits, g.limit)
	}
	return limits
}

// mode returns the most frequent value of the second half of xs.
func mode(xs []int) int {
	count := map[int]int{}
	best := 0
	for _, x := range xs[len(xs)/2:] {
		count[x]++
		if count[x] > count[best] {
			best = x
		}
	}
	return best
}

func goodputs(w workload, n int) string {
	var b strings.Builder
	for c := 1; c <= min(n, 12); c++ {
		fmt.Fprintf(&b, " %d:%.0f", c, w.goodput(c))
	}
	return b.String()
}
