package acked

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgtx-go/pgtx/internal/resolve"
)

// The pacing of a watcher's rounds.
const (
	// tries bounds the questions of one round, pause apart, while none is
	// answered (the resolver's connection may still reach the old server).
	tries = 5
	pause = 200 * time.Millisecond
	// again is the least time between two rounds that ask again about
	// commits the last round could not judge.
	again = time.Second
)

// Surveyor asks a server, once, what became of commits and how it
// replicates ([resolve.Resolver]).
type Surveyor interface {
	Survey(ctx context.Context, system int64, xids []uint64) (resolve.Survey, error)
}

// Settings configure a [Watcher]. Every field is required.
type Settings struct {
	// Size bounds the commits kept; MaxAge bounds the age of those asked
	// about.
	Size   int
	MaxAge time.Duration
	// Refresh is how often, at most, a pool that writes asks again how its
	// server replicates.
	Refresh  time.Duration
	Surveyor Surveyor
	Clock    resolve.Clock
	// Discarded receives each commit that a later run of the server
	// provably does not have, with that run and its answer about the id.
	Discarded func(e Entry, run resolve.Run, status string)
	// Replication receives how the server replicates when it first
	// acknowledges commits that no standby has, and at every change of
	// that since.
	Replication func(r resolve.Replication, run resolve.Run)
}

// Counts are the verdicts of a watcher's rounds.
type Counts struct {
	Survived, Discarded, Unproven int64
}

// Watcher keeps a pool's acknowledged commits and, when the pool meets a
// later run of its server, asks that run about them in a round of its own,
// off the calls' path. Record is the only method on a call's path. A
// Watcher's goroutine runs only during a round; Close stops it.
type Watcher struct {
	s    Settings
	ring *Ring

	// The latest run, for Record's comparison without the lock; and the
	// time (unix nanoseconds) from which a Record asks for a round.
	hintTL    atomic.Int32
	hintStart atomic.Int64
	hintEpoch atomic.Int64
	nextRound atomic.Int64

	survived, discarded, unproven atomic.Int64

	ctx    context.Context // ended by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	spawn  func(func()) // runs a round's goroutine (tests run it inline)

	mu        sync.Mutex
	known     bool // a run has been seen
	system    int64
	latest    resolve.Run
	want      bool // a round is wanted
	running   bool // a round's goroutine runs
	surveyed  bool // a round has asked how the server replicates
	async     bool // what was last said of the server's replication
	unsettled bool // the last round failed or left commits undecided
	lastRound time.Time
}

// New returns a Watcher with settings s.
func New(s Settings) *Watcher {
	ctx, cancel := context.WithCancel(context.Background())
	return &Watcher{s: s, ring: NewRing(s.Size), ctx: ctx, cancel: cancel, spawn: func(f func()) { go f() }}
}

// Record records a commit the call learned of at at, with the call's
// label. On the calls' path it costs the ring's Add and a few atomic loads,
// unless the commit's run is not the latest seen, or a round is due.
func (w *Watcher) Record(id resolve.ID, label string, at time.Time) {
	w.ring.Add(id, label, at)
	if id.Run.Timeline == w.hintTL.Load() && id.Run.Start == w.hintStart.Load() &&
		id.Run.Epoch == w.hintEpoch.Load() && at.UnixNano() < w.nextRound.Load() {
		return
	}
	w.note(id.System, id.Run, at, true)
}

// Seen records that a connection's capture, made at at, reached run of
// system, out of recovery.
func (w *Watcher) Seen(system int64, run resolve.Run, at time.Time) {
	w.note(system, run, at, false)
}

// note takes a run the pool reached, when a connection's capture was made
// or a commit recorded (wrote), and starts a round when one is due: the run is
// later than the latest (ask it about the commits of the runs before), the
// pool writes and has not asked how the server replicates for Refresh, or
// the last round left something to ask again.
func (w *Watcher) note(system int64, run resolve.Run, at time.Time, wrote bool) {
	w.mu.Lock()
	changed := false
	switch {
	case !w.known || system != w.system:
		changed = w.known // another system: a server of its own
		w.known, w.system = true, system
		w.setLatest(run)
	case run.After(w.latest):
		changed = true
		w.setLatest(run)
	}
	switch {
	case changed && (w.surveyed || w.ring.Len() > 0):
	case wrote && at.UnixNano() >= w.nextRound.Load():
	case w.unsettled && at.Sub(w.lastRound) >= again:
	default:
		w.mu.Unlock()
		return
	}
	w.want = true
	start := !w.running && w.ctx.Err() == nil
	if start {
		w.running = true
		w.wg.Add(1)
	}
	w.mu.Unlock()
	if start {
		w.spawn(w.work)
	}
}

// setLatest makes run the latest, under w.mu.
func (w *Watcher) setLatest(run resolve.Run) {
	w.latest = run
	w.hintTL.Store(run.Timeline)
	w.hintStart.Store(run.Start)
	w.hintEpoch.Store(run.Epoch)
}

// work runs rounds while one is wanted.
func (w *Watcher) work() {
	defer w.wg.Done()
	for {
		w.mu.Lock()
		if !w.want || w.ctx.Err() != nil {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.want = false
		system, latest := w.system, w.latest
		now := w.s.Clock.Now()
		w.lastRound = now
		w.nextRound.Store(now.Add(w.s.Refresh).UnixNano())
		w.mu.Unlock()
		settled := w.round(system, latest, now)
		w.mu.Lock()
		w.unsettled = !settled
		w.mu.Unlock()
	}
}

// round asks the server once (again after a failure, up to tries) about
// the commits of system recorded in runs before latest, at most MaxAge old
// at now, and judges each answer ([resolve.Survival]); it says how the
// server replicates when that changed. It reports whether everything was
// judged.
func (w *Watcher) round(system int64, latest resolve.Run, now time.Time) bool {
	entries := w.ring.Pending(func(e Entry) bool {
		return e.ID.System == system && latest.After(e.ID.Run) && now.Sub(e.At) <= w.s.MaxAge
	})
	xids := make([]uint64, len(entries))
	for i, e := range entries {
		xids[i] = e.ID.Xid
	}
	var sv resolve.Survey
	var err error
	for try := 1; ; try++ {
		if sv, err = w.s.Surveyor.Survey(w.ctx, system, xids); err == nil || try == tries {
			break
		}
		if w.s.Clock.Sleep(w.ctx, pause) != nil {
			return false
		}
	}
	if err != nil {
		return false
	}
	settled := true
	for i, e := range entries {
		v := sv.View
		verdict := resolve.Undecided
		if len(sv.Statuses) == len(entries) {
			v.Status = sv.Statuses[i]
			verdict = resolve.Survival(e.ID, v)
		}
		switch verdict {
		case resolve.Survived:
			w.survived.Add(1)
		case resolve.Unproven:
			w.unproven.Add(1)
		case resolve.Discarded:
			w.discarded.Add(1)
			w.s.Discarded(e, v.Run, v.Status)
		default:
			settled = false
			continue
		}
		w.ring.Done(e.Seq)
	}
	if sv.View.Run.Timeline != 0 { // out of recovery: the server that acknowledges commits
		w.replication(sv.Replication, sv.View.Run)
	}
	return settled
}

// replication says how the server replicates when it first acknowledges
// commits that no standby has, and at every change of that since.
func (w *Watcher) replication(r resolve.Replication, run resolve.Run) {
	async := r.Asynchronous()
	w.mu.Lock()
	say := async != w.async
	w.surveyed, w.async = true, async
	w.mu.Unlock()
	if say {
		w.s.Replication(r, run)
	}
}

// Counts returns the verdicts so far.
func (w *Watcher) Counts() Counts {
	return Counts{Survived: w.survived.Load(), Discarded: w.discarded.Load(), Unproven: w.unproven.Load()}
}

// Close stops a round in progress and waits for its goroutine; no round
// starts after it. A nil Watcher has nothing to close.
func (w *Watcher) Close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.cancel()
	w.mu.Unlock()
	w.wg.Wait()
}
