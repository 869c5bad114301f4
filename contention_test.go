package pgtx

import (
	"context"
	"errors"
	"fmt"
	"github.com/pgtx-go/pgtx/internal/retry"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// newTestGate returns the gate of the empty label of a manager on a fake
// clock, with the default threshold.
func newTestGate(t *testing.T, maxConns int) (*gate, *fakeClock, *recordingContention) {
	t.Helper()
	clk := &fakeClock{now: time.Unix(1000, 0)}
	tr := &recordingContention{}
	m := newContention(ContentionConfig{}, clk, maxConns, 0, tr)
	return &m.def, clk, tr
}

// recordingContention records the manager's events.
type recordingContention struct {
	TransactionTracer
	events []TraceContentionData
}

func (r *recordingContention) TraceContention(_ context.Context, d TraceContentionData) {
	r.events = append(r.events, d)
}

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
func simulate(t *testing.T, g *gate, clk *fakeClock, w workload, callers, n int) []int {
	t.Helper()
	type running struct {
		end     time.Time
		adm     admission
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
			adm, err := g.admit(ctx, 0, false)
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
		class := classNone
		acc += w.conflict(r.c)
		if acc >= 1 {
			acc--
			class = ClassConflict
		}
		if r.stalled {
			class = ClassConflict
		}
		g.done(ctx, r.adm, class, r.d)
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

// TestContentionLimitFindsTheBestConcurrency drives the gate with scripted
// workloads whose best concurrency is known, and checks the limit settles
// there: the manager engages on conflicts, then probes limits up and down
// and keeps the one that commits most.
func TestContentionLimitFindsTheBestConcurrency(t *testing.T) {
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
			if !s.Limiting || s.Limit != g.limit || s.AttemptCount != 20000 || s.CommitCount+s.ConflictCount != 20000 {
				t.Errorf("stats %+v do not add up", s)
			}
		})
	}
}

func goodputs(w workload, n int) string {
	var b strings.Builder
	for c := 1; c <= min(n, 12); c++ {
		fmt.Fprintf(&b, " %d:%.0f", c, w.goodput(c))
	}
	return b.String()
}

// TestContentionStaysOpenWithoutConflicts: conflicts at or below the
// threshold never engage the gate, and the open gate allocates nothing.
func TestContentionStaysOpenWithoutConflicts(t *testing.T) {
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
		adm, _ := g.admit(ctx, 0, false)
		g.done(ctx, adm, classNone, time.Millisecond)
	}); n != 0 {
		t.Errorf("an attempt through the open gate allocates %v times, want 0", n)
	}
}

// TestContentionOpensWhenCalm: once the limit is no longer reached and
// conflicts have fallen, the gate opens and says so.
func TestContentionOpensWhenCalm(t *testing.T) {
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
	simulate(t, g, clk, calm, 1, 3*contentionWindow)
	if g.limiting.Load() {
		t.Fatalf("the gate still limits (limit %d) with one caller and no conflicts", g.limit)
	}
	last := tr.events[len(tr.events)-1]
	if last.Limiting || last.Limit != 0 || last.Previous == 0 {
		t.Errorf("last event %+v, want the gate opening", last)
	}
}

// TestContentionOldestFirst: waiters are let in oldest call first, as
// slots free, and a waiter whose context ends leaves no slot taken.
func TestContentionOldestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := bubbleGate(t, 1)
		ctx := context.Background()
		first, err := g.admit(ctx, 0, false)
		if err != nil || !first.held {
			t.Fatalf("admit on a free limit: %+v, %v", first, err)
		}
		order := make(chan int64, 3)
		cctx, cancel := context.WithCancel(ctx)
		cancelled := make(chan error, 1)
		go func() {
			_, err := g.admit(cctx, 5, false)
			cancelled <- err
		}()
		for _, prio := range []int64{30, 10, 20} {
			go func() {
				adm, err := g.admit(ctx, prio, false)
				if err != nil {
					t.Errorf("admit(%d): %v", prio, err)
					return
				}
				order <- prio
				g.done(ctx, adm, classNone, time.Millisecond)
			}()
			synctest.Wait()
		}
		cancel()
		if err := <-cancelled; !errors.Is(err, context.Canceled) {
			t.Fatalf("a waiter whose context ended got %v", err)
		}
		if s := g.stats(); s.Waiting != 3 || s.Running != 1 {
			t.Fatalf("stats %+v, want 3 waiting and 1 running", s)
		}
		g.done(ctx, first, classNone, time.Millisecond)
		var got []int64
		for range 3 {
			got = append(got, <-order)
		}
		if want := []int64{10, 20, 30}; !slices.Equal(got, want) {
			t.Errorf("admitted in order %v, want %v (oldest first)", got, want)
		}
		synctest.Wait()
		if s := g.stats(); s.Waiting != 0 || s.Running != 0 || g.running != 0 {
			t.Errorf("after every attempt ended: %+v, %d slots taken", s, g.running)
		}
	})
}

// bubbleGate returns a gate on the real clock (inside a synctest bubble,
// the bubble's), limiting to limit.
func bubbleGate(t *testing.T, limit int) *gate {
	t.Helper()
	g, _, _ := newTestGate(t, 4)
	g.m.clock = realClock{}
	engage(g, limit)
	return g
}

// limitedLoop is a retry loop on the real clock through a gate that
// limits to one attempt at once, whose attempts take 50ms on average.
func limitedLoop(t *testing.T) (*gate, *retryLoop) {
	t.Helper()
	g := bubbleGate(t, 1)
	g.meanAttempt = 50 * time.Millisecond
	l := newLoop(RetryConfig{}, realClock{})
	l.gate = g
	return g, l
}

// engage makes g limit its attempts to limit.
func engage(g *gate, limit int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.limit, g.best, g.probeDir, g.probeEvery = limit, limit, -1, contentionProbeEvery
	g.est = map[int]float64{}
	g.win = measurement{start: g.m.clock.Now(), last: g.m.clock.Now()}
	g.limiting.Store(true)
}

// TestContentionDeadline: a wait at the gate counts against the caller's
// deadline. An attempt that could not finish in the time left (by the
// label's mean attempt time) is refused at once; one that waits gives up
// when only that much time is left, and the acquire timeout bounds the
// wait too.
func TestContentionDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := bubbleGate(t, 1)
		g.meanAttempt = 20 * time.Millisecond
		ctx := context.Background()
		hold, _ := g.admit(ctx, 0, false)

		short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := g.admit(short, 1, false); !errors.Is(err, errAdmissionDeadline) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("admit with 10ms left and 20ms attempts: %v, want the deadline error", err)
		}
		if time.Since(start) != 0 {
			t.Errorf("refused after %v, want at once", time.Since(start))
		}

		long, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel2()
		start = time.Now()
		if _, err := g.admit(long, 1, false); !errors.Is(err, errAdmissionDeadline) {
			t.Errorf("admit with 100ms left: %v, want the deadline error", err)
		}
		if got := time.Since(start); got != 80*time.Millisecond {
			t.Errorf("gave up after %v, want 80ms (the deadline less one mean attempt)", got)
		}

		g.m.acquireTimeout = 30 * time.Millisecond
		long, cancel3 := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel3()
		start = time.Now()
		if _, err := g.admit(long, 1, false); !errors.Is(err, ErrAcquireTimeout) {
			t.Errorf("admit bounded by a 30ms acquire timeout: %v, want ErrAcquireTimeout", err)
		}
		if got := time.Since(start); got != 30*time.Millisecond {
			t.Errorf("gave up after %v, want 30ms", got)
		}
		g.done(ctx, hold, classNone, time.Millisecond)
		if s := g.stats(); s.Running != 0 || s.Waiting != 0 {
			t.Errorf("after the waits: %+v", s)
		}
	})
}

// TestRetryLoopWithTheGate: while the gate limits, a conflict retry does
// not sleep (the gate orders it); an overload retry still backs off; and a
// retry the gate cannot admit before the deadline ends the call as a
// backoff past the deadline would.
func TestRetryLoopWithTheGate(t *testing.T) {
	conflict, overload := pgErr("40001"), pgErr("53300")
	t.Run("no pause after a conflict", func(t *testing.T) {
		g, clk, _ := newTestGate(t, 4)
		engage(g, 2)
		l := newLoop(RetryConfig{Jitter: func() float64 { return 0.5 }}, clk)
		l.gate = g
		calls := 0
		if err := l.run(context.Background(), scripted(&calls, conflict, overload)); err != nil {
			t.Fatal(err)
		}
		if want := []time.Duration{0, retry.Backoff(0.5, defaultBaseBackoff, defaultMaxBackoff, 2)}; !slices.Equal(clk.sleeps, want) {
			t.Errorf("pauses %v, want %v", clk.sleeps, want)
		}
		if s := g.stats(); s.AttemptCount != 3 || s.ConflictCount != 1 || s.CommitCount != 1 || s.Running != 0 {
			t.Errorf("stats %+v", s)
		}
	})
	t.Run("no refusal for a pause not taken", func(t *testing.T) {
		// 5ms left, and the pause before the first retry would be 10ms:
		// alone, the loop stops (the backoff rule); through the gate it
		// retries at once.
		deadline := time.Now().Add(time.Hour)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		for _, limiting := range []bool{false, true} {
			g, clk, _ := newTestGate(t, 4)
			clk.now = deadline.Add(-5 * time.Millisecond)
			if limiting {
				engage(g, 2)
			}
			l := newLoop(RetryConfig{Jitter: func() float64 { return 1 }}, clk)
			l.gate = g
			calls := 0
			err := l.run(ctx, scripted(&calls, conflict))
			if want := map[bool]int{false: 1, true: 2}[limiting]; calls != want {
				t.Errorf("limiting %v: %d attempts (%v), want %d", limiting, calls, err, want)
			}
		}
	})
	t.Run("the deadline ends the wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g, l := limitedLoop(t)
			hold, _ := g.admit(context.Background(), 0, false)
			defer g.done(context.Background(), hold, classNone, time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
			defer cancel()
			calls := 0
			err := l.run(ctx, scripted(&calls))
			if calls != 0 || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errAdmissionDeadline) {
				t.Fatalf("first attempt: %d calls, %v; want none and the deadline error", calls, err)
			}
			var re *RetryError
			if errors.As(err, &re) {
				t.Errorf("a call refused before its first attempt got %v, want the error itself", err)
			}
		})
	})
	t.Run("the deadline ends a retry's wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g, l := limitedLoop(t)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			other := make(chan admission, 1)
			calls := 0
			err := l.run(ctx, func(context.Context) (Class, error) {
				calls++
				// Another call takes the only slot as this attempt ends.
				go func() {
					a, _ := g.admit(context.Background(), -1, false)
					other <- a
				}()
				synctest.Wait()
				return ClassConflict, conflict
			})
			defer func() { g.done(context.Background(), <-other, classNone, time.Millisecond) }()
			var re *RetryError
			if calls != 1 || !errors.As(err, &re) || re.reason != retry.Deadline || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%d calls, %v; want one, and a RetryError for the deadline", calls, err)
			}
		})
	})
}

// TestContentionLabels: each label has a gate of its own, up to a bound
// past which labels share the empty label's; Stats lists them in order.
func TestContentionLabels(t *testing.T) {
	m := newContention(ContentionConfig{Threshold: 0.5}, &fakeClock{}, 8, 0, nil)
	if m.threshold != 0.5 {
		t.Errorf("threshold %v, want 0.5", m.threshold)
	}
	if a, again := m.gate("a"), m.gate("a"); a != again || a == m.gate("b") || m.gate("") != &m.def {
		t.Fatal("one gate per label")
	}
	for i := range maxContentionLabels + 10 {
		m.gate(fmt.Sprintf("l%03d", i))
	}
	if got := m.gate("one too many"); got != &m.def {
		t.Error("a label past the bound must share the empty label's gate")
	}
	s := m.stats()
	if len(s) != maxContentionLabels+1 || s[0].Label != "" || s[1].Label != "a" || s[2].Label != "b" {
		t.Errorf("%d entries, first %q %q %q", len(s), s[0].Label, s[1].Label, s[2].Label)
	}
}

// TestContentionCloseLetsWaitersGo: closing the pool opens every gate, so
// no caller stays waiting.
func TestContentionCloseLetsWaitersGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newContention(ContentionConfig{}, realClock{}, 4, 0, nil)
		g := m.gate("x")
		engage(g, 1)
		ctx := context.Background()
		hold, _ := g.admit(ctx, 0, false)
		got := make(chan error, 1)
		go func() {
			a, err := g.admit(ctx, 1, false)
			g.done(ctx, a, classNone, 0)
			got <- err
		}()
		synctest.Wait()
		m.close()
		if err := <-got; err != nil {
			t.Errorf("a waiter after close: %v", err)
		}
		g.done(ctx, hold, classNone, 0)
		if s := g.stats(); s.Limiting || s.Running != 0 || s.Waiting != 0 {
			t.Errorf("after close: %+v", s)
		}
	})
}

// TestContentionClimbsBackWhenRowsCool: a gate engaged on rows that then
// stop conflicting (or that were never hot: a chance burst) climbs back to
// the pool's size and opens, although every caller is waiting.
func TestContentionClimbsBackWhenRowsCool(t *testing.T) {
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
			simulate(t, g, clk, cool, 8, 40*contentionWindow)
			if g.limiting.Load() {
				t.Fatalf("still limiting at %d after %d attempts without conflicts (events %+v)", g.limit, 40*contentionWindow, tr.events)
			}
		})
	}
}

// TestContentionStarvingCallRunsAlone: a call that lost three times in a
// row is let in only when nothing else of the label runs, and nothing is
// let in beside it, so the database cannot make it lose again.
func TestContentionStarvingCallRunsAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := bubbleGate(t, 2)
		ctx := context.Background()
		first, _ := g.admit(ctx, 0, false)
		order := make(chan string, 2)
		alone := make(chan admission, 1)
		go func() {
			a, err := g.admit(ctx, 5, true)
			if err != nil {
				t.Errorf("exclusive admit: %v", err)
			}
			order <- "exclusive"
			alone <- a
		}()
		synctest.Wait()
		go func() {
			a, err := g.admit(ctx, 10, false)
			if err != nil {
				t.Errorf("admit: %v", err)
			}
			order <- "newer"
			g.done(ctx, a, classNone, time.Millisecond)
		}()
		synctest.Wait()
		if s := g.stats(); s.Waiting != 2 || s.Running != 1 {
			t.Fatalf("with one attempt running and a limit of 2: %+v; want both waiting (the exclusive one for the running one, the newer one behind it)", s)
		}
		g.done(ctx, first, classNone, time.Millisecond)
		synctest.Wait()
		if got := <-order; got != "exclusive" {
			t.Fatalf("%s let in first, want the exclusive call", got)
		}
		if s := g.stats(); s.Waiting != 1 || s.Running != 1 {
			t.Fatalf("while the exclusive attempt runs: %+v; want the newer one still waiting", s)
		}
		g.done(ctx, <-alone, classNone, time.Millisecond)
		if got := <-order; got != "newer" {
			t.Fatalf("%s, want the newer call after the exclusive one", got)
		}
	})
}
