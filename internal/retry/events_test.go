package retry

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/contention"
	"github.com/pgtx-go/pgtx/internal/fakeclock"
)

// TestLoopEvents: the tracer gets its events in order, each with the
// context it pairs with, and what each attempt became: its class and
// error, its time on the clock, the decision after it; the call's end says
// how many attempts there were, the error returned, and the call's time,
// pauses included.
func TestLoopEvents(t *testing.T) {
	clk := &fakeclock.Clock{T: t0}
	r := &recorder{}
	l := newLoop(clk)
	l.Tracer = r
	calls, sawCtx := 0, 0
	script := scripted(&calls, conflict, overload)
	err := l.Run(context.Background(), func(ctx context.Context) (classify.Class, error) {
		if ctx.Value(ctxKey{}) == calls+1 {
			sawCtx++ // the attempt runs with its AttemptStart's context
		}
		clk.T = clk.T.Add(3 * time.Millisecond)
		return script(ctx)
	})
	if err != nil || sawCtx != 3 {
		t.Fatalf("%v, %d attempts with their own context; want success after 3", err, sawCtx)
	}
	ms := time.Millisecond
	want := []event{
		{name: "CallStart"},
		{name: "AttemptStart", n: 1, ctx: "call"},
		{name: "AttemptEnd", end: AttemptEnd{Attempt: 1, Err: conflict, Class: classify.Conflict, Duration: 3 * ms, Retry: true, Backoff: 10 * ms}, ctx: 1},
		{name: "AttemptStart", n: 2, ctx: "call"},
		{name: "AttemptEnd", end: AttemptEnd{Attempt: 2, Err: overload, Class: classify.Overload, Duration: 3 * ms, Retry: true, Backoff: 400 * ms}, ctx: 2},
		{name: "AttemptStart", n: 3, ctx: "call"},
		{name: "AttemptEnd", end: AttemptEnd{Attempt: 3, Duration: 3 * ms}, ctx: 3},
		{name: "CallEnd", call: CallEnd{Attempts: 3, Duration: 419 * ms}, ctx: "call"},
	}
	if !slices.Equal(r.events, want) {
		t.Errorf("events\n%+v\nwant\n%+v", r.events, want)
	}
}

// TestLoopEventsOfAStop: the last AttemptEnd and CallEnd carry the error
// the call returns; a call the context ended during a pause is said to be
// interrupted.
func TestLoopEventsOfAStop(t *testing.T) {
	clk := &fakeclock.Clock{T: t0}
	r := &recorder{}
	l := newLoop(clk)
	l.Tracer = r
	calls := 0
	err := l.Run(fakeclock.Deadline(clk, 150*time.Millisecond), scripted(&calls, repeat(unavailable, 10)...))
	if len(r.events) != 4 || calls != 1 {
		t.Fatalf("events %+v after %d attempts; want 4 after 1", r.events, calls)
	}
	// The pause lasts until past the deadline: the loop decided a retry,
	// and the context ended the call during the pause.
	if e := r.events[2].end; !e.Retry || e.Backoff != 250*time.Millisecond || e.Err != unavailable {
		t.Errorf("AttemptEnd %+v, want a retry after 250ms", e)
	}
	if e := r.events[3].call; e.Err != err || !e.Interrupted || e.Attempts != 1 || e.Duration != 150*time.Millisecond {
		t.Errorf("CallEnd %+v, want the call's error %v, interrupted after 150ms", e, err)
	}

	r.events = nil
	l.Policy.MaxAdaptiveRetries = 0
	err = l.Run(context.Background(), scripted(new(int), overload))
	if e := r.events[2].end; e.Err != err || e.Retry || r.events[3].call.Err != err || r.events[3].call.Interrupted {
		t.Errorf("events %+v; want the last AttemptEnd and CallEnd to carry %v", r.events, err)
	}
}

// TestLoopWithTheGate: while the gate limits, a conflict retry does not
// pause (the gate orders it) and an overload retry still backs off; the
// attempts under the limit report it; a retry the gate cannot admit before
// the deadline ends the call as a pause past the deadline would.
func TestLoopWithTheGate(t *testing.T) {
	t.Run("no pause after a conflict", func(t *testing.T) {
		clk := &fakeclock.Clock{T: t0}
		m, g := limitingGate(t, clk, 0)
		before := m.Stats()[0]
		r := &recorder{}
		l := newLoop(clk)
		l.Gate, l.Tracer, l.Policy.Jitter = g, r, jitter(0.5)
		if err := l.Run(context.Background(), scripted(new(int), conflict, overload)); err != nil {
			t.Fatal(err)
		}
		if want := []time.Duration{0, Backoff(0.5, 100*time.Millisecond, 10*time.Second, 2)}; !slices.Equal(clk.Sleeps, want) {
			t.Errorf("pauses %v, want %v", clk.Sleeps, want)
		}
		s := m.Stats()[0]
		if s.Attempts-before.Attempts != 3 || s.Conflicts-before.Conflicts != 1 || s.Commits-before.Commits != 1 || s.Running != 0 {
			t.Errorf("stats %+v, before the call %+v", s, before)
		}
		if e := r.events[2].end; e.Limit != 1 {
			t.Errorf("AttemptEnd %+v, want the limit it was admitted under", e)
		}
	})
	t.Run("no refusal for a pause not taken", func(t *testing.T) {
		// 5ms left, and the pause before the first retry would be 10ms:
		// alone, the loop stops; through the gate it retries at once.
		deadline := time.Now().Add(time.Hour)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		for _, limiting := range []bool{false, true} {
			clk := &fakeclock.Clock{T: deadline.Add(-5 * time.Millisecond)}
			g := contention.New(contention.Settings{Clock: clk, Threshold: 0.1, MaxLimit: 4}).Gate("")
			if limiting {
				_, g = limitingGate(t, clk, 0)
			}
			l := newLoop(clk)
			l.Gate = g
			calls := 0
			err := l.Run(ctx, scripted(&calls, conflict))
			if want := map[bool]int{false: 1, true: 2}[limiting]; calls != want {
				t.Errorf("limiting %v: %d attempts (%v), want %d", limiting, calls, err, want)
			}
		}
	})
	t.Run("the deadline ends the wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, g := limitingGate(t, RealClock{}, 50*time.Millisecond)
			hold, _ := g.Admit(context.Background(), 0, 0)
			defer g.Done(context.Background(), hold, contention.Committed, time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
			defer cancel()
			l := newLoop(RealClock{})
			l.Gate = g
			calls := 0
			err := l.Run(ctx, scripted(&calls))
			if calls != 0 || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, contention.ErrAdmissionDeadline) {
				t.Fatalf("first attempt: %d calls, %v; want none and the deadline error", calls, err)
			}
			if s := (*stopped)(nil); errors.As(err, &s) {
				t.Errorf("a call refused before its first attempt got %v, want the error itself", err)
			}
		})
	})
	t.Run("the deadline ends a retry's wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, g := limitingGate(t, RealClock{}, 50*time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			l := newLoop(RealClock{})
			l.Gate = g
			other := make(chan contention.Admission, 1)
			calls := 0
			err := l.Run(ctx, func(context.Context) (classify.Class, error) {
				calls++
				// Another call takes the only slot as this attempt ends.
				go func() {
					a, _ := g.Admit(context.Background(), -1, 0)
					other <- a
				}()
				synctest.Wait()
				return classify.Conflict, conflict
			})
			defer func() { g.Done(context.Background(), <-other, contention.Committed, time.Millisecond) }()
			var s *stopped
			if calls != 1 || !errors.As(err, &s) || s.why.Stop != Deadline || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%d calls, %v; want one, and a stop for the deadline", calls, err)
			}
		})
	})
}

// TestOutcome: a commit, a conflict and any other failure each count as
// such at the gate.
func TestOutcome(t *testing.T) {
	for c := classify.None; c <= classify.Permanent; c++ {
		want := contention.Failed
		switch c {
		case classify.None:
			want = contention.Committed
		case classify.Conflict:
			want = contention.Conflict
		}
		if got := outcome(c); got != want {
			t.Errorf("outcome(%d) = %v, want %v", c, got, want)
		}
	}
}

// TestLoopDoesNotAllocate: a call that commits at once, through an open
// gate and with a budget, allocates nothing without a tracer.
func TestLoopDoesNotAllocate(t *testing.T) {
	l := newLoop(RealClock{})
	l.Budget = NewBudget(0.2, 10, 10*time.Second, time.Now())
	l.Gate = contention.New(contention.Settings{Clock: RealClock{}, Threshold: 0.1, MaxLimit: 4}).Gate("")
	ok := func(context.Context) (classify.Class, error) { return classify.None, nil }
	if n := testing.AllocsPerRun(100, func() { _ = l.Run(context.Background(), ok) }); n != 0 {
		t.Errorf("the loop allocates %v times per call", n)
	}
}

// TestRealClock: a pause ends after its time, or at once with the
// context's error when the context ends first.
func TestRealClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := RealClock{}
		start := c.Now()
		if err := c.Sleep(context.Background(), time.Second); err != nil || c.Now().Sub(start) != time.Second {
			t.Errorf("a pause of 1s: %v after %v", err, c.Now().Sub(start))
		}
		ctx, cancel := context.WithCancel(context.Background())
		if err := c.Sleep(ctx, 0); err != nil {
			t.Errorf("no pause: %v", err)
		}
		cancel()
		if err := c.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
			t.Errorf("a pause the context ended: %v", err)
		}
		if err := c.Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
			t.Errorf("no pause, the context ended: %v", err)
		}
	})
}
