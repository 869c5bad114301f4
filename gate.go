package pgtx

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// gate admits the attempts of one label. While it is open (not limiting)
// an attempt only counts itself with atomic additions; while it limits,
// admission, release and measurement run under mu.
type gate struct {
	m     *contention
	label string

	limiting atomic.Bool
	inflight atomic.Int64 // attempts between admit and done, open or not
	attempts atomic.Int64 // all attempts, for Stats
	commits  atomic.Int64

	mu sync.Mutex
	// openBase is attempts when the open gate last looked at its conflict
	// ratio, and openConflicts the conflicts since.
	openBase      int64
	openConflicts int64
	conflicts     int64
	limit         int
	running       int  // attempts admitted while limiting, running now
	alone         bool // the one running is exclusive
	// epoch counts the changes of limit; current counts the running
	// attempts admitted since the last one, which alone are measured.
	epoch, current int
	waiters        []*waiter // ascending priority
	wait           histogram
	win            measurement
	est            map[int]float64 // commits per second, by limit
	best           int
	probing        bool
	probeDir       int
	sinceProbe     int
	probeEvery     int
	settling       bool          // the current window follows a change of limit
	meanAttempt    time.Duration // smoothed attempt time while limiting
}

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

// waiter is an attempt waiting at the gate.
type waiter struct {
	prio     int64
	ch       chan struct{}
	admitted bool // under gate.mu
	limit    int  // the limit it was admitted under, and its epoch
	epoch    int
	// exclusive: it runs alone (a call that kept losing).
	exclusive bool
}

// admission is what admit gives an attempt for done.
type admission struct {
	held  bool // the attempt holds a slot of the limit
	limit int  // the limit it was admitted under (0: the gate was open)
	epoch int  // the gate's epoch then
	alone bool // it runs alone
	wait  time.Duration
}

// errAdmissionDeadline is the error of an attempt whose wait at the gate
// ended because, admitted any later, it could not have finished before
// the caller's deadline.
var errAdmissionDeadline error = admissionDeadlineError{}

type admissionDeadlineError struct{}

func (admissionDeadlineError) Error() string {
	return "pgtx: the deadline would pass before a transaction admitted now could finish (contention manager)"
}

func (admissionDeadlineError) Is(target error) bool { return target == context.DeadlineExceeded }

func (admissionDeadlineError) Timeout() bool { return true }

// admit returns once the attempt may run. prio orders the waiters,
// smallest first: the call's start, so the oldest call goes first.
//
// An exclusive attempt, a call's retry after contentionStarving conflicts
// in a row, runs alone: it is let in when nothing else of the label runs,
// and nothing else is let in until it ends. Oldest first cannot make the
// database let the oldest win, but running it alone can (the greedy
// contention manager's guarantee of progress), so no call gives up after
// MaxRetries conflicts while the gate limits.
func (g *gate) admit(ctx context.Context, prio int64, exclusive bool) (admission, error) {
	g.inflight.Add(1)
	if !g.limiting.Load() {
		return admission{}, nil
	}
	g.mu.Lock()
	if !g.limiting.Load() {
		g.mu.Unlock()
		return admission{}, nil
	}
	now := g.m.clock.Now()
	if g.free(exclusive) && len(g.waiters) == 0 {
		g.accrue(now)
		g.running++
		g.current++
		g.alone = exclusive
		t := admission{held: true, limit: g.limit, epoch: g.epoch, alone: exclusive}
		g.wait.observe(0)
		g.mu.Unlock()
		return t, nil
	}
	bail := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		bail = d.Sub(now) - g.meanAttempt
		if bail <= 0 {
			g.mu.Unlock()
			g.inflight.Add(-1)
			return admission{}, errAdmissionDeadline
		}
	}
	w := &waiter{prio: prio, ch: make(chan struct{}, 1), exclusive: exclusive}
	i := len(g.waiters)
	for i > 0 && g.waiters[i-1].prio > prio {
		i--
	}
	g.waiters = append(g.waiters, nil)
	copy(g.waiters[i+1:], g.waiters[i:])
	g.waiters[i] = w
	g.win.waited = true
	g.mu.Unlock()

	var timeout <-chan time.Time
	var why error
	if at := g.m.acquireTimeout; at > 0 && (bail < 0 || at < bail) {
		bail, why = at, &acquireTimeoutError{timeout: at}
	} else if bail > 0 {
		why = errAdmissionDeadline
	}
	if bail > 0 {
		t := time.NewTimer(bail)
		defer t.Stop()
		timeout = t.C
	}
	var err error
	select {
	case <-w.ch:
	case <-ctx.Done():
		err = ctx.Err()
	case <-timeout:
		err = why
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	waited := g.m.clock.Now().Sub(now)
	g.wait.observe(waited)
	if !w.admitted {
		for j, x := range g.waiters {
			if x == w {
				g.waiters = append(g.waiters[:j], g.waiters[j+1:]...)
				break
			}
		}
		g.inflight.Add(-1)
		return admission{}, err
	}
	t := admission{held: w.limit > 0, limit: w.limit, epoch: w.epoch, wait: waited, alone: w.exclusive && w.limit > 0}
	if err != nil {
		// Admitted as the wait ended: give the slot to the next.
		g.releaseLocked(t, g.m.clock.Now())
		g.inflight.Add(-1)
		return admission{}, err
	}
	return t, nil
}

// done ends an attempt of class c that took d, admitted with t.
func (g *gate) done(ctx context.Context, t admission, c Class, d time.Duration) {
	g.inflight.Add(-1)
	g.attempts.Add(1)
	if c == classNone {
		g.commits.Add(1)
	}
	if !t.held {
		if c != ClassConflict && !g.limiting.Load() {
			return
		}
		g.mu.Lock()
		if c == ClassConflict {
			g.conflicts++
		}
		if !g.limiting.Load() {
			g.openConflicts++
			g.considerLimiting(ctx)
		}
		g.mu.Unlock()
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.m.clock.Now()
	if c == ClassConflict {
		g.conflicts++
	}
	if t.epoch == g.epoch && g.limiting.Load() {
		w := &g.win
		w.attempts++
		switch c {
		case classNone:
			w.commits++
		case ClassConflict:
			w.conflicts++
		}
		if g.meanAttempt == 0 {
			g.meanAttempt = d
		} else {
			g.meanAttempt += (d - g.meanAttempt) / 8
		}
	}
	g.releaseLocked(t, now)
	if g.win.attempts >= max(contentionWindow, 4*g.limit) && now.Sub(g.win.start) >= contentionWindowAttempts*g.meanAttempt {
		g.measure(ctx, now)
	}
}

// considerLimiting starts limiting when the open gate's conflict ratio,
// over at least a window of attempts, is above the threshold.
func (g *gate) considerLimiting(ctx context.Context) {
	n := g.attempts.Load() - g.openBase
	if n < contentionOpenWindow {
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
	g.sinceProbe, g.probeEvery = contentionProbeEvery-1, contentionProbeEvery
	g.est = map[int]float64{}
	g.running, g.current = 0, 0
	g.epoch++
	g.meanAttempt = 0
	g.win = measurement{start: now, last: now}
	g.limiting.Store(true)
	g.trace(ctx, 0, ratio)
}

// releaseLocked gives back t's slot and lets waiters in up to the limit.
func (g *gate) releaseLocked(t admission, now time.Time) {
	g.accrue(now)
	if t.held && g.running > 0 {
		g.running--
		if t.epoch == g.epoch && g.current > 0 {
			g.current--
		}
	}
	if t.alone {
		g.alone = false
	}
	limiting := g.limiting.Load()
	for len(g.waiters) > 0 && (!limiting || g.free(g.waiters[0].exclusive)) {
		w := g.waiters[0]
		g.waiters = g.waiters[1:]
		w.admitted = true
		if limiting {
			g.running++
			g.current++
			g.alone = w.exclusive
			w.limit, w.epoch = g.limit, g.epoch
		}
		w.ch <- struct{}{}
	}
}

// free reports whether an attempt may be let in now: nothing runs alone,
// and the limit has room; for an exclusive one, nothing runs at all.
func (g *gate) free(exclusive bool) bool {
	if exclusive {
		return g.running == 0
	}
	return !g.alone && g.running < g.limit
}

// accrue adds the time since the last event to the integral of running.
func (g *gate) accrue(now time.Time) {
	w := &g.win
	if dt := now.Sub(w.last).Seconds(); dt > 0 && g.current > 0 {
		w.busy += dt
	}
	w.last = now
}

// measure closes a window: it records the goodput of the limit and picks
// the next limit, or opens the gate.
func (g *gate) measure(ctx context.Context, now time.Time) {
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
		g.est[g.limit] = old + contentionSmoothing*(goodput-old)
	} else {
		g.est[g.limit] = goodput
	}
	prev := g.limit
	if !w.waited && ratio <= g.m.threshold/2 || g.limit >= g.m.maxLimit && ratio <= g.m.threshold {
		// The gate holds nobody back, or no more than the pool would, and
		// the attempts hardly conflict: open it.
		g.limiting.Store(false)
		g.epoch++
		g.current = 0
		g.openBase = g.attempts.Load()
		g.openConflicts = 0
		g.limit = 0
		g.win = measurement{start: now, last: now}
		g.releaseLocked(admission{}, now)
		g.trace(ctx, prev, ratio)
		return
	}
	calm := ratio <= g.m.threshold/2
	next := g.best
	if g.probing {
		g.probing = false
		// A probe up that hardly conflicted wins unless it clearly
		// committed less: on rows that are not hot after all, the gate
		// climbs back to the pool's size, and opens.
		up := g.probeDir > 0 && calm && g.est[g.limit] >= contentionCalmMargin*g.est[g.best]
		if up || g.est[g.limit] > g.est[g.best] {
			// Better: go on the same way at once.
			g.best = g.limit
			g.probeEvery = contentionProbeEvery
			g.sinceProbe = g.probeEvery - 1
		} else {
			// Worse: try the other way, later each time both ways lose.
			if g.probeDir > 0 {
				g.probeEvery = min(2*g.probeEvery, maxContentionProbeEvery)
			}
			g.probeDir = -g.probeDir
			g.sinceProbe = 0
		}
		next = g.best
	} else {
		g.best = g.limit
		g.sinceProbe++
		if calm && g.probeDir < 0 {
			// Hardly a conflict at this limit: the next probe goes up.
			g.probeDir = 1
		}
		if g.sinceProbe >= g.probeEvery {
			g.sinceProbe = 0
			cand := g.neighbour(g.probeDir)
			if cand == g.best {
				g.probeDir = -g.probeDir
				cand = g.neighbour(g.probeDir)
			}
			if cand != g.best {
				g.probing = true
				next = cand
			}
		}
	}
	g.win = measurement{start: now, last: now}
	if next != g.limit {
		g.limit = next
		g.epoch++
		g.current = 0
		g.settling = true
		g.releaseLocked(admission{}, now)
		g.trace(ctx, prev, ratio)
	}
}

// neighbour is the limit a probe from the best one tries in direction
// dir: half as many or half as many again, at least one apart.
func (g *gate) neighbour(dir int) int {
	step := max(1, g.best/2)
	return min(max(g.best+dir*step, 1), g.m.maxLimit)
}

// open stops limiting and lets every waiter in.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.limiting.Store(false)
	g.limit = 0
	g.epoch++
	g.current = 0
	g.releaseLocked(admission{}, g.m.clock.Now())
}

func (g *gate) trace(ctx context.Context, prev int, ratio float64) {
	if g.m.tracer == nil {
		return
	}
	g.m.tracer.TraceContention(ctx, TraceContentionData{Label: g.label, Limiting: g.limiting.Load(),
		Limit: g.limit, Previous: prev, ConflictRatio: ratio})
}

func (g *gate) stats() ContentionStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := ContentionStats{Label: g.label, Limiting: g.limiting.Load(), Limit: g.limit,
		Running: int(g.inflight.Load()) - len(g.waiters), Waiting: len(g.waiters),
		AttemptCount: g.attempts.Load(), ConflictCount: g.conflicts, CommitCount: g.commits.Load(),
		Wait: g.wait.snapshot()}
	return s
}
