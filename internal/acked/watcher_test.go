package acked

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/internal/fakeclock"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

const sys = 7714471509565171385

var (
	runA = resolve.Run{Timeline: 1, Start: 1_000, Epoch: 1_100}
	runB = resolve.Run{Timeline: 2, Start: 2_000, Epoch: 2_100} // runA's standby, promoted
	runC = resolve.Run{Timeline: 3, Start: 3_000, Epoch: 3_100}
	// onB is runB's first checkpoint: nothing proves an id of runA's
	// given in the shared history.
	onB = resolve.Checkpoint{Timeline: 2, LSN: 9000, NextXid: 5000}
)

// surveyor answers a watcher's questions with answer, and records them.
type surveyor struct {
	mu     sync.Mutex
	asked  [][]uint64
	answer func(ctx context.Context, xids []uint64) (resolve.Survey, error)
}

func (s *surveyor) Survey(ctx context.Context, system int64, xids []uint64) (resolve.Survey, error) {
	s.mu.Lock()
	s.asked = append(s.asked, slices.Clone(xids))
	s.mu.Unlock()
	if system != sys {
		return resolve.Survey{}, errors.New("asked about another system")
	}
	return s.answer(ctx, xids)
}

func (s *surveyor) questions() [][]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.asked)
}

// statusesOn answers as a server in run with checkpoint last, whose
// status of each id is in statuses ("committed" when missing), replicating
// as rep.
func statusesOn(run resolve.Run, last resolve.Checkpoint, statuses map[uint64]string, rep resolve.Replication) func(context.Context, []uint64) (resolve.Survey, error) {
	return func(_ context.Context, xids []uint64) (resolve.Survey, error) {
		s := resolve.Survey{View: resolve.View{System: sys, Run: run, Last: last}, Replication: rep, Statuses: []string{}}
		for _, x := range xids {
			st, ok := statuses[x]
			if !ok {
				st = "committed"
			}
			s.Statuses = append(s.Statuses, st)
		}
		return s, nil
	}
}

// discard is a report of a discarded commit.
type discard struct {
	Label  string
	Xid    uint64
	At     time.Time
	From   int32
	To     int32
	Status string
}

// harness is a watcher whose rounds run inline, on a fake clock, with
// what it reports.
type harness struct {
	w         *Watcher
	clk       *fakeclock.Clock
	sv        *surveyor
	discarded []discard
	said      []resolve.Replication
}

func newHarness(t *testing.T, size int) *harness {
	t.Helper()
	h := &harness{clk: &fakeclock.Clock{T: time.Unix(1_000_000, 0)}, sv: &surveyor{}}
	h.sv.answer = statusesOn(runA, resolve.Checkpoint{Timeline: 1}, nil, resolve.Replication{})
	h.w = New(Settings{
		Size: size, MaxAge: 5 * time.Minute, Refresh: time.Minute, Surveyor: h.sv, Clock: h.clk,
		Discarded: func(e Entry, run resolve.Run, status string) {
			h.discarded = append(h.discarded, discard{e.Label, e.ID.Xid, e.At, e.ID.Run.Timeline, run.Timeline, status})
		},
		Replication: func(r resolve.Replication, _ resolve.Run) { h.said = append(h.said, r) },
	})
	h.w.spawn = func(f func()) { f() }
	t.Cleanup(h.w.Close)
	return h
}

// commit records a commit of xid on run, labelled, at the clock's time.
func (h *harness) commit(xid uint64, run resolve.Run, label string) time.Time {
	at := h.clk.Now()
	h.w.Record(resolve.ID{Xid: xid, System: sys, Run: run}, label, at)
	return at
}

// TestWatcherFailover: commits acknowledged on one run, then a connection
// to a later run (a promoted standby): the watcher asks that run once
// about every one of them, reports those it does not have ("aborted",
// "not yet assigned", "in progress": label, id, time, timelines, answer),
// counts a "committed" it cannot prove apart, never reports it, and asks
// nothing more until something changes.
func TestWatcherFailover(t *testing.T) {
	h := newHarness(t, 16)
	h.w.Seen(sys, runA, h.clk.Now())
	var at [5]time.Time
	for i := range at {
		at[i] = h.commit(uint64(700+i), runA, "transfer")
		_ = h.clk.Sleep(context.Background(), time.Second)
	}
	if q := h.sv.questions(); len(q) != 1 || len(q[0]) != 0 {
		t.Fatalf("questions after the first commits: %v, want one, about no commit (how the server replicates)", q)
	}

	h.sv.answer = statusesOn(runB, onB, map[uint64]string{701: "aborted", 702: "not yet assigned", 703: "in progress"}, resolve.Replication{})
	h.w.Seen(sys, runB, h.clk.Now())
	q := h.sv.questions()
	if len(q) != 2 || !slices.Equal(q[1], []uint64{700, 701, 702, 703, 704}) {
		t.Fatalf("questions = %v, want one about 700..704", q)
	}
	want := []discard{
		{"transfer", 701, at[1], 1, 2, "aborted"},
		{"transfer", 702, at[2], 1, 2, "not yet assigned"},
		{"transfer", 703, at[3], 1, 2, "in progress"},
	}
	if !slices.EqualFunc(h.discarded, want, func(a, b discard) bool {
		return a == discard{b.Label, b.Xid, a.At, b.From, b.To, b.Status} && a.At.Equal(b.At)
	}) {
		t.Errorf("discarded = %+v, want %+v", h.discarded, want)
	}
	if c := h.w.Counts(); c != (Counts{Discarded: 3, Unproven: 2}) {
		t.Errorf("counts = %+v, want 3 discarded, 2 unproven (committed, nothing proves the id was not given again)", c)
	}

	// Nothing changed: no question; a commit on the new run neither.
	h.w.Seen(sys, runB, h.clk.Now())
	h.commit(900, runB, "transfer")
	h.w.Seen(sys, runA, h.clk.Now()) // an older run
	if q := h.sv.questions(); len(q) != 2 {
		t.Errorf("%d questions, want still 2: %v", len(q), q)
	}
}

// TestWatcherSurvivors: a "committed" proven the transaction's own (the
// promoted standby's latest checkpoint is still on the old timeline, past
// the id) is a survivor: counted, not reported.
func TestWatcherSurvivors(t *testing.T) {
	h := newHarness(t, 16)
	h.w.Seen(sys, runA, h.clk.Now())
	h.commit(700, runA, "a")
	h.commit(800, runA, "b")
	h.sv.answer = statusesOn(runB, resolve.Checkpoint{Timeline: 1, NextXid: 750}, nil, resolve.Replication{})
	h.w.Seen(sys, runB, h.clk.Now())
	if c := h.w.Counts(); c != (Counts{Survived: 1, Unproven: 1}) || len(h.discarded) != 0 {
		t.Errorf("counts %+v, discarded %+v; want 700 survived, 800 unproven, none reported", c, h.discarded)
	}
}

// TestWatcherBounds: only the latest Size commits, and only those at most
// MaxAge old, are asked about; commits of another system never are.
func TestWatcherBounds(t *testing.T) {
	h := newHarness(t, 3)
	h.w.Seen(sys, runA, h.clk.Now())
	h.commit(1, runA, "old")
	_ = h.clk.Sleep(context.Background(), 6*time.Minute)
	h.w.Record(resolve.ID{Xid: 2, System: sys + 1, Run: runA}, "elsewhere", h.clk.Now())
	for x := uint64(3); x <= 6; x++ {
		h.commit(x, runA, "new")
	}
	h.sv.answer = statusesOn(runB, onB, nil, resolve.Replication{})
	h.w.Seen(sys, runB, h.clk.Now())
	q := h.sv.questions()
	if last := q[len(q)-1]; !slices.Equal(last, []uint64{4, 5, 6}) {
		t.Errorf("asked about %v, want the latest 3 (4, 5, 6): 1 is too old, 2 of another system, 3 pushed out", last)
	}
}

// TestWatcherAsksAgain: a round that could not judge (the resolver's
// connection still reached the old run) or got no answer asks again at
// the next connection, at least a second later; each question is retried,
// a pause apart, up to tries times.
func TestWatcherAsksAgain(t *testing.T) {
	h := newHarness(t, 16)
	h.w.Seen(sys, runA, h.clk.Now())
	h.commit(700, runA, "t")
	h.sv.answer = statusesOn(runA, resolve.Checkpoint{Timeline: 1}, nil, resolve.Replication{}) // still the old server
	h.w.Seen(sys, runB, h.clk.Now())
	if c := h.w.Counts(); c != (Counts{}) {
		t.Fatalf("counts = %+v after the old run answered, want none", c)
	}
	n := len(h.sv.questions())
	h.w.Seen(sys, runB, h.clk.Now()) // too soon
	if len(h.sv.questions()) != n {
		t.Fatalf("asked again at once")
	}

	fails := 0
	h.sv.answer = func(context.Context, []uint64) (resolve.Survey, error) {
		fails++
		return resolve.Survey{}, errors.New("connection refused")
	}
	h.clk.Sleeps = nil
	_ = h.clk.Sleep(context.Background(), again)
	h.w.Seen(sys, runB, h.clk.Now())
	if fails != tries || len(h.clk.Sleeps) != 1+tries-1 {
		t.Fatalf("%d questions, pauses %v; want %d questions %v apart", fails, h.clk.Sleeps, tries, pause)
	}

	h.sv.answer = statusesOn(runB, onB, map[uint64]string{700: "aborted"}, resolve.Replication{})
	_ = h.clk.Sleep(context.Background(), again)
	h.w.Seen(sys, runB, h.clk.Now())
	if len(h.discarded) != 1 || h.discarded[0].Xid != 700 {
		t.Errorf("discarded = %+v, want 700 once the new run answered", h.discarded)
	}
}

// TestWatcherReplication: a pool that writes asks how its server
// replicates at its first commit, says so once when the server
// acknowledges commits no standby has, asks again only every Refresh, and
// says it again when that changes. A pool that only reads asks nothing.
func TestWatcherReplication(t *testing.T) {
	async := resolve.Replication{Standbys: 1, SynchronousCommit: "on"}
	sync := resolve.Replication{Standbys: 1, SynchronousStandbyNames: "*", SynchronousCommit: "on"}

	reader := newHarness(t, 16)
	reader.w.Seen(sys, runA, reader.clk.Now())
	reader.w.Seen(sys, runB, reader.clk.Now())
	if q := reader.sv.questions(); len(q) != 0 {
		t.Errorf("a pool that never wrote asked %v", q)
	}

	h := newHarness(t, 16)
	h.sv.answer = statusesOn(runA, resolve.Checkpoint{Timeline: 1}, nil, async)
	h.w.Seen(sys, runA, h.clk.Now())
	for range 10 {
		h.commit(700, runA, "t")
		_ = h.clk.Sleep(context.Background(), time.Second)
	}
	if q, said := h.sv.questions(), h.said; len(q) != 1 || len(said) != 1 || said[0] != async {
		t.Fatalf("questions %v, said %+v; want one question at the first commit, and the asynchronous standby said once", q, said)
	}
	_ = h.clk.Sleep(context.Background(), time.Minute)
	h.commit(701, runA, "t")
	if q := h.sv.questions(); len(q) != 2 || len(h.said) != 1 {
		t.Fatalf("after Refresh: %d questions, said %+v; want a second question and nothing new said", len(q), h.said)
	}
	h.sv.answer = statusesOn(runA, resolve.Checkpoint{Timeline: 1}, nil, sync)
	_ = h.clk.Sleep(context.Background(), time.Minute)
	h.commit(702, runA, "t")
	if len(h.said) != 2 || h.said[1] != sync {
		t.Errorf("said %+v, want the change to synchronous said", h.said)
	}
	// A standby answering (in recovery) says nothing of replication.
	h.sv.answer = statusesOn(resolve.Run{Start: 5}, resolve.Checkpoint{}, nil, async)
	_ = h.clk.Sleep(context.Background(), time.Minute)
	h.commit(703, runA, "t")
	if len(h.said) != 2 {
		t.Errorf("said %+v after a standby answered", h.said)
	}
}

// TestWatcherClose: Close ends a round waiting for its answer and waits
// for its goroutine; nothing starts after it.
func TestWatcherClose(t *testing.T) {
	clk := &lockedClock{c: fakeclock.Clock{T: time.Unix(1_000_000, 0)}}
	asked := make(chan struct{}, 1)
	sv := &surveyor{answer: func(ctx context.Context, _ []uint64) (resolve.Survey, error) {
		asked <- struct{}{}
		<-ctx.Done()
		return resolve.Survey{}, ctx.Err()
	}}
	w := New(Settings{Size: 4, MaxAge: time.Minute, Refresh: time.Minute, Surveyor: sv, Clock: clk,
		Discarded: func(Entry, resolve.Run, string) {}, Replication: func(resolve.Replication, resolve.Run) {}})
	w.Record(resolve.ID{Xid: 1, System: sys, Run: runA}, "t", clk.Now())
	<-asked
	w.Close()
	w.Seen(sys, runB, clk.Now())
	if n := len(sv.questions()); n != 1 {
		t.Errorf("%d questions, want 1: none after Close", n)
	}
}

// TestWatcherConcurrent: commits recorded from many goroutines while
// rounds run on their own goroutine (new runs met meanwhile): every commit
// of an earlier run is judged, and reported, once. Run it with -race.
func TestWatcherConcurrent(t *testing.T) {
	const writers, each = 8, 200
	clk := &lockedClock{c: fakeclock.Clock{T: time.Unix(1_000_000, 0)}}
	sv := &surveyor{}
	sv.answer = func(ctx context.Context, xids []uint64) (resolve.Survey, error) {
		aborted := make(map[uint64]string, len(xids))
		for _, x := range xids {
			aborted[x] = "aborted"
		}
		return statusesOn(runC, resolve.Checkpoint{Timeline: 3}, aborted, resolve.Replication{})(ctx, xids)
	}
	var mu sync.Mutex
	reported := map[uint64]int{}
	all := make(chan struct{})
	w := New(Settings{Size: writers * each, MaxAge: time.Hour, Refresh: time.Minute, Surveyor: sv, Clock: clk,
		Discarded: func(e Entry, _ resolve.Run, _ string) {
			mu.Lock()
			defer mu.Unlock()
			reported[e.ID.Xid]++
			if len(reported) == writers*each {
				close(all)
			}
		},
		Replication: func(resolve.Replication, resolve.Run) {}})
	defer w.Close()
	w.Seen(sys, runA, clk.Now())
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				run := runA
				if i >= each/2 {
					run = runB
				}
				w.Record(resolve.ID{Xid: uint64(g*each + i), System: sys, Run: run}, "t", clk.Now())
				if i == each/2 {
					w.Seen(sys, runB, clk.Now())
				}
			}
		})
	}
	wg.Wait()
	w.Seen(sys, runC, clk.Now())
	select {
	case <-all:
	case <-time.After(30 * time.Second): // a bound against a hang, not a measure
		mu.Lock()
		t.Fatalf("%d of %d commits reported", len(reported), writers*each)
	}
	w.Close()
	for x, n := range reported {
		if n != 1 {
			t.Errorf("commit %d reported %d times", x, n)
		}
	}
	if c := w.Counts(); c != (Counts{Discarded: writers * each}) {
		t.Errorf("counts = %+v, want %d discarded", c, writers*each)
	}
}

// lockedClock is a fake clock safe for concurrent use.
type lockedClock struct {
	mu sync.Mutex
	c  fakeclock.Clock
}

func (l *lockedClock) Now() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c.Now()
}

func (l *lockedClock) Sleep(ctx context.Context, d time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c.Sleep(ctx, d)
}
