package contention

import (
	"context"
	"math"
	"time"
)

// measurement accumulates one window of attempts at one limit.
type measurement struct {
	attempts, commits, conflicts int
	waited                       bool // an admission waited
	// The time integral of the attempts admitted under the limit that
	// are running, over the time any ran, gives the concurrency the limit
	// really allowed.
	start, last time.Time
	busy        float64 // seconds during which an attempt of the epoch ran
}

// considerLimiting starts limiting when the open gate's conflict ratio,
// over at least a window of attempts, is above the threshold.
func (g *Gate) considerLimiting(ctx context.Context) {
	n := g.attempts.Load() - g.openBase
	if n < openWindow {
		return
	}
	ratio := float64(g.openConflicts) / float64(n)
	g.openBase += n
	g.openConflicts = 0
	if ratio <= g.m.threshold {
		return
	}
	now := g.m.clock.Now()
	// Start from the concurrency that was committing: of the attempts
	// running, the share that did not conflict.
	running := float64(g.inflight.Load() + 1)
	limit := min(max(int(math.Round(running*(1-ratio))), 1), g.m.maxLimit)
	g.limit, g.best, g.probeDir, g.probing = limit, limit, -1, false
	g.sinceProbe, g.probeEvery = probeInterval-1, probeInterval
	g.est = map[int]float64{}
	g.running, g.current = 0, 0
	g.epoch++
	g.meanAttempt = 0
	g.win = measurement{start: now, last: now}
	g.limiting.Store(true)
	g.trace(ctx, 0, ratio)
}

// accrue adds the time since the last event to the integral of running.
func (g *Gate) accrue(now time.Time) {
	w := &g.win
	if dt := now.Sub(w.last).Seconds(); dt > 0 && g.current > 0 {
		w.busy += dt
	}
	w.last = now
}

// measure closes a window: it records the goodput of the limit and picks
// the next limit, or opens the gate.
func (g *Gate) measure(ctx context.Context, now time.Time) {
	w := g.win
	if g.settling {
		// The first window after a change of limit still carries the
		// attempts of the old one (their locks, their waiters): it is not
		// measured.
		g.settling = false
		g.win = measurement{start: now, last: now}
		return
	}
	ratio := float64(w.conflicts) / float64(w.attempts)
	goodput := 0.0
	if w.busy > 0 {
		goodput = float64(w.commits) / w.busy
	}
	if old, ok := g.est[g.limit]; ok {
		g.est[g.limit] = old + smoothing*(goodput-old)
	} else {
		g.est[g.limit] = goodput
	}
	prev := g.limit
	if !w.waited && ratio <= g.m.threshold/2 || g.limit >= g.m.maxLimit && ratio <= g.m.threshold {
		// The gate holds nobody back, or no more than the pool would, and
		// the attempts hardly conflict: open it.
		g.openLocked(ctx, now, prev, ratio)
		return
	}
	calm := ratio <= g.m.threshold/2
	var next int
	if g.probing {
		next = g.judgeProbe(calm)
	} else {
		next = g.nextProbe(calm)
	}
	g.win = measurement{start: now, last: now}
	if next != g.limit {
		g.limit = next
		g.epoch++
		g.current = 0
		g.settling = true
		g.releaseLocked(Admission{}, now)
		g.trace(ctx, prev, ratio)
	}
}

// openLocked opens the gate, which limited at prev with a conflict ratio
// of ratio.
func (g *Gate) openLocked(ctx context.Context, now time.Time, prev int, ratio float64) {
	g.limiting.Store(false)
	g.epoch++
	g.current = 0
	g.openBase = g.attempts.Load()
	g.openConflicts = 0
	g.limit = 0
	g.win = measurement{start: now, last: now}
	g.releaseLocked(Admission{}, now)
	g.trace(ctx, prev, ratio)
}

// judgeProbe ends a probe of the current limit, calm when its attempts
// hardly conflicted, and returns the limit to run at next: the best.
func (g *Gate) judgeProbe(calm bool) int {
	g.probing = false
	// A probe up that hardly conflicted wins unless it clearly
	// committed less: on rows that are not hot after all, the gate
	// climbs back to the pool's size, and opens.
	up := g.probeDir > 0 && calm && g.est[g.limit] >= calmMargin*g.est[g.best]
	if up || g.est[g.limit] > g.est[g.best] {
		// Better: go on the same way at once.
		g.best = g.limit
		g.probeEvery = probeInterval
		g.sinceProbe = g.probeEvery - 1
	} else {
		// Worse: try the other way, later each time both ways lose.
		if g.probeDir > 0 {
			g.probeEvery = min(2*g.probeEvery, maxProbeInterval)
		}
		g.probeDir = -g.probeDir
		g.sinceProbe = 0
	}
	return g.best
}

// nextProbe counts a window at the best limit, calm when its attempts
// hardly conflicted, and returns the limit to run at next: a neighbour to
// probe when it is time, else the best.
func (g *Gate) nextProbe(calm bool) int {
	g.best = g.limit
	g.sinceProbe++
	if calm && g.probeDir < 0 {
		// Hardly a conflict at this limit: the next probe goes up.
		g.probeDir = 1
	}
	if g.sinceProbe < g.probeEvery {
		return g.best
	}
	g.sinceProbe = 0
	cand := g.neighbour(g.probeDir)
	if cand == g.best {
		g.probeDir = -g.probeDir
		cand = g.neighbour(g.probeDir)
	}
	if cand != g.best {
		g.probing = true
	}
	return cand
}

// neighbour is the limit a probe from the best one tries in direction
// dir: half as many or half as many again, at least one apart.
func (g *Gate) neighbour(dir int) int {
	step := max(1, g.best/2)
	return min(max(g.best+dir*step, 1), g.m.maxLimit)
}

// trace reports a change of limit from prev, after a measurement whose
// conflict ratio was ratio.
func (g *Gate) trace(ctx context.Context, prev int, ratio float64) {
	if g.m.onLimit == nil {
		return
	}
	g.m.onLimit(ctx, g.label, g.limiting.Load(), g.limit, prev, ratio)
}
