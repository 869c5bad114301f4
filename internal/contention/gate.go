package contention

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgtx-go/pgtx/internal/histogram"
)

// Gate admits the attempts of one label. While it is open (not limiting)
// an attempt only counts itself with atomic additions; while it limits,
// admission, release and measurement run under mu.
type Gate struct {
	m     *Manager
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
	waiters        []*waiter      // ascending priority
	wait           histogram.Live // the waits at the gate
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

// Admission is what [Gate.Admit] gives an attempt for [Gate.Done].
type Admission struct {
	// Held reports that the attempt holds a slot of the limit: the gate
	// limited when it was let in.
	Held bool
	// Limit is the limit it was admitted under (0: the gate was open), and
	// Wait how long it waited at the gate.
	Limit int
	Wait  time.Duration
	epoch int  // the gate's epoch then
	alone bool // it runs alone
}

// Outcome is how an attempt ended, as the gate counts it.
type Outcome uint8

const (
	// Failed is an attempt that failed otherwise than with a conflict.
	Failed Outcome = iota
	// Committed is an attempt that committed.
	Committed
	// Conflict is an attempt that failed with a conflict (a serialization
	// failure or a deadlock).
	Conflict
)

// ErrAdmissionDeadline is the error of an attempt whose wait at the gate
// ended because, admitted any later, it could not have finished before
// the caller's deadline. It matches context.DeadlineExceeded.
var ErrAdmissionDeadline error = admissionDeadlineError{}

type admissionDeadlineError struct{}

func (admissionDeadlineError) Error() string {
	return "pgtx: the deadline would pass before a transaction admitted now could finish (contention manager)"
}

func (admissionDeadlineError) Is(target error) bool { return target == context.DeadlineExceeded }

func (admissionDeadlineError) Timeout() bool { return true }

func (g *Gate) init(m *Manager, label string) {
	g.m, g.label = m, label
}

// Limiting reports whether the gate limits the label's attempts now: a
// conflict retry then waits at the gate instead of pausing.
func (g *Gate) Limiting() bool { return g.limiting.Load() }

// Admit returns once the attempt may run. prio orders the waiters,
// smallest first: the call's start, so the oldest call goes first. lost is
// the number of conflicts in a row the call has had.
//
// An exclusive attempt, a call's retry after starving conflicts in a row,
// runs alone: it is let in when nothing else of the label runs, and
// nothing else is let in until it ends. Oldest first cannot make the
// database let the oldest win, but running it alone can (the greedy
// contention manager's guarantee of progress), so no call gives up after
// its maximum of retries for conflicts while the gate limits.
//
// A wait ends with ctx, with [ErrAdmissionDeadline] once an attempt let in
// could no longer finish before ctx's deadline (by the label's mean
// attempt time), or with the acquire timeout's error.
func (g *Gate) Admit(ctx context.Context, prio int64, lost int) (Admission, error) {
	exclusive := lost >= starving
	g.inflight.Add(1)
	if !g.limiting.Load() {
		return Admission{}, nil
	}
	g.mu.Lock()
	if !g.limiting.Load() {
		g.mu.Unlock()
		return Admission{}, nil
	}
	now := g.m.clock.Now()
	if g.free(exclusive) && len(g.waiters) == 0 {
		t := g.admitLocked(now, exclusive)
		g.mu.Unlock()
		return t, nil
	}
	bail := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		bail = d.Sub(now) - g.meanAttempt
		if bail <= 0 {
			g.mu.Unlock()
			g.inflight.Add(-1)
			return Admission{}, ErrAdmissionDeadline
		}
	}
	w := g.enqueueLocked(prio, exclusive)
	g.mu.Unlock()
	err := g.awaitTurn(ctx, w, bail)
	return g.leaveQueue(w, now, err)
}

// admitLocked admits an attempt at once, a slot being free and no one
// waiting.
func (g *Gate) admitLocked(now time.Time, exclusive bool) Admission {
	g.accrue(now)
	g.running++
	g.current++
	g.alone = exclusive
	g.wait.Observe(0)
	return Admission{Held: true, Limit: g.limit, epoch: g.epoch, alone: exclusive}
}

// Done ends an attempt admitted with t that ended with o after d. d
// matters only for an attempt that held a slot: an open gate needs no
// clock.
func (g *Gate) Done(ctx context.Context, t Admission, o Outcome, d time.Duration) {
	g.inflight.Add(-1)
	g.attempts.Add(1)
	if o == Committed {
		g.commits.Add(1)
	}
	if !t.Held {
		if o != Conflict && !g.limiting.Load() {
			return
		}
		g.mu.Lock()
		if o == Conflict {
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
	if o == Conflict {
		g.conflicts++
	}
	if t.epoch == g.epoch && g.limiting.Load() {
		w := &g.win
		w.attempts++
		switch o {
		case Committed:
			w.commits++
		case Conflict:
			w.conflicts++
		}
		if g.meanAttempt == 0 {
			g.meanAttempt = d
		} else {
			g.meanAttempt += (d - g.meanAttempt) / 8
		}
	}
	g.releaseLocked(t, now)
	if g.win.attempts >= max(window, 4*g.limit) && now.Sub(g.win.start) >= windowAttempts*g.meanAttempt {
		g.measure(ctx, now)
	}
}

// releaseLocked gives back t's slot and lets waiters in up to the limit.
func (g *Gate) releaseLocked(t Admission, now time.Time) {
	g.accrue(now)
	if t.Held && g.running > 0 {
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
func (g *Gate) free(exclusive bool) bool {
	if exclusive {
		return g.running == 0
	}
	return !g.alone && g.running < g.limit
}

// open stops limiting and lets every waiter in.
func (g *Gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.limiting.Store(false)
	g.limit = 0
	g.epoch++
	g.current = 0
	g.releaseLocked(Admission{}, g.m.clock.Now())
}

func (g *Gate) stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Stats{Label: g.label, Limiting: g.limiting.Load(), Limit: g.limit,
		Running: int(g.inflight.Load()) - len(g.waiters), Waiting: len(g.waiters),
		Attempts: g.attempts.Load(), Conflicts: g.conflicts, Commits: g.commits.Load(),
		Wait: g.wait.Snapshot()}
}
