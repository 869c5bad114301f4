package pgtx

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pgtx-go/pgtx/internal/contention"
	"github.com/pgtx-go/pgtx/internal/histogram"
	"github.com/pgtx-go/pgtx/internal/retry"
)

// recordingContention records the manager's events.
type recordingContention struct {
	TransactionTracer
	events []TraceContentionData
}

func (r *recordingContention) TraceContention(_ context.Context, d TraceContentionData) {
	r.events = append(r.events, d)
}

// limitingGate returns a pool's manager on c, with tracer, whose gate of
// label limits to one attempt at once: driven there as a pool's would be,
// by an open window of attempts that all conflicted. Its one attempt under
// the limit took mean, the label's mean attempt time from then on.
func limitingGate(t *testing.T, c clock, tracer TransactionTracer, label string, mean time.Duration) (*contention.Manager, *contention.Gate) {
	t.Helper()
	m := newContention(ContentionConfig{}, c, 4, 0, tracer)
	g := m.Gate(label)
	ctx := context.Background()
	for n := 0; !g.Limiting(); n++ {
		if n == 1000 {
			t.Fatal("the gate does not limit after 1000 conflicts in a row")
		}
		a, err := g.Admit(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		g.Done(ctx, a, contention.Conflict, 0)
	}
	a, err := g.Admit(ctx, 0, 0)
	if err != nil || !a.Held || a.Limit != 1 {
		t.Fatalf("admit at the gate that limits: %+v, %v; want a slot of a limit of 1", a, err)
	}
	g.Done(ctx, a, contention.Committed, mean)
	return m, g
}

// limitedLoop is a retry loop on the real clock through a gate that
// limits to one attempt at once, whose attempts take 50ms on average.
func limitedLoop(t *testing.T) (*contention.Gate, *retryLoop) {
	t.Helper()
	_, g := limitingGate(t, realClock{}, nil, "", 50*time.Millisecond)
	l := newLoop(RetryConfig{}, realClock{})
	l.gate = g
	return g, l
}

// TestRetryLoopWithTheGate: while the gate limits, a conflict retry does
// not sleep (the gate orders it); an overload retry still backs off; and a
// retry the gate cannot admit before the deadline ends the call as a
// backoff past the deadline would.
func TestRetryLoopWithTheGate(t *testing.T) {
	conflict, overload := pgErr("40001"), pgErr("53300")
	t.Run("no pause after a conflict", func(t *testing.T) {
		clk := &fakeClock{now: time.Unix(1000, 0)}
		m, g := limitingGate(t, clk, nil, "", 0)
		before := m.Stats()[0]
		l := newLoop(RetryConfig{Jitter: func() float64 { return 0.5 }}, clk)
		l.gate = g
		calls := 0
		if err := l.run(context.Background(), scripted(&calls, conflict, overload)); err != nil {
			t.Fatal(err)
		}
		if want := []time.Duration{0, retry.Backoff(0.5, defaultBaseBackoff, defaultMaxBackoff, 2)}; !slices.Equal(clk.sleeps, want) {
			t.Errorf("pauses %v, want %v", clk.sleeps, want)
		}
		s := m.Stats()[0]
		if s.Attempts-before.Attempts != 3 || s.Conflicts-before.Conflicts != 1 || s.Commits-before.Commits != 1 || s.Running != 0 {
			t.Errorf("stats %+v, before the call %+v", s, before)
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
			clk := &fakeClock{now: deadline.Add(-5 * time.Millisecond)}
			g := newContention(ContentionConfig{}, clk, 4, 0, nil).Gate("")
			if limiting {
				_, g = limitingGate(t, clk, nil, "", 0)
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
			hold, _ := g.Admit(context.Background(), 0, 0)
			defer g.Done(context.Background(), hold, contention.Committed, time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
			defer cancel()
			calls := 0
			err := l.run(ctx, scripted(&calls))
			if calls != 0 || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, contention.ErrAdmissionDeadline) {
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
			other := make(chan contention.Admission, 1)
			calls := 0
			err := l.run(ctx, func(context.Context) (Class, error) {
				calls++
				// Another call takes the only slot as this attempt ends.
				go func() {
					a, _ := g.Admit(context.Background(), -1, 0)
					other <- a
				}()
				synctest.Wait()
				return ClassConflict, conflict
			})
			defer func() { g.Done(context.Background(), <-other, contention.Committed, time.Millisecond) }()
			var re *RetryError
			if calls != 1 || !errors.As(err, &re) || re.reason != retry.Deadline || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%d calls, %v; want one, and a RetryError for the deadline", calls, err)
			}
		})
	})
}

// TestContentionSettings: the pool resolves its ContentionConfig, its size,
// its acquire timeout and its tracer to the manager's settings.
func TestContentionSettings(t *testing.T) {
	tests := []struct {
		name           string
		threshold      float64
		maxConns       int
		acquireTimeout time.Duration
		tracer         TransactionTracer
		want           contention.Settings
	}{
		{name: "defaults", maxConns: 8, want: contention.Settings{Threshold: defaultContentionThreshold, MaxLimit: 8}},
		{name: "a threshold", threshold: 0.5, maxConns: 8, want: contention.Settings{Threshold: 0.5, MaxLimit: 8}},
		{name: "no pool size", maxConns: 0, want: contention.Settings{Threshold: defaultContentionThreshold, MaxLimit: 1}},
		{name: "an acquire timeout", maxConns: 2, acquireTimeout: 30 * time.Millisecond,
			want: contention.Settings{Threshold: defaultContentionThreshold, MaxLimit: 2, AcquireTimeout: 30 * time.Millisecond}},
		{name: "a contention tracer", maxConns: 2, tracer: &recordingContention{},
			want: contention.Settings{Threshold: defaultContentionThreshold, MaxLimit: 2}},
		{name: "another tracer", maxConns: 2, tracer: (TransactionTracer)(nil),
			want: contention.Settings{Threshold: defaultContentionThreshold, MaxLimit: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeClock{}
			s := contentionSettings(ContentionConfig{Threshold: tt.threshold}, clk, tt.maxConns, tt.acquireTimeout, tt.tracer)
			if s.Clock != clock(clk) || s.Threshold != tt.want.Threshold || s.MaxLimit != tt.want.MaxLimit || s.AcquireTimeout != tt.want.AcquireTimeout {
				t.Errorf("settings %+v, want %+v", s, tt.want)
			}
			if err := s.AcquireTimeoutErr; (err != nil) != (tt.acquireTimeout > 0) ||
				err != nil && (!errors.Is(err, ErrAcquireTimeout) || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), tt.acquireTimeout.String())) {
				t.Errorf("acquire timeout error %v, want ErrAcquireTimeout with the timeout, and only with one", err)
			}
			if _, ok := tt.tracer.(ContentionTracer); (s.OnLimit != nil) != ok {
				t.Errorf("OnLimit set %v, want %v: only a ContentionTracer gets the events", s.OnLimit != nil, ok)
			}
		})
	}
	if m := newContention(ContentionConfig{Threshold: -1}, &fakeClock{}, 8, 0, nil); m != nil {
		t.Error("a negative threshold must switch the manager off")
	}
}

// TestContentionTracerAndStats: a change of limit reaches the tracer as
// TraceContentionData, and the manager's state reaches Stats as
// ContentionStats, the empty label first.
func TestContentionTracerAndStats(t *testing.T) {
	tr := &recordingContention{}
	m, g := limitingGate(t, &fakeClock{now: time.Unix(1000, 0)}, tr, "x", time.Millisecond)
	want := TraceContentionData{Label: "x", Limiting: true, Limit: 1, ConflictRatio: 1}
	if len(tr.events) != 1 || tr.events[0] != want {
		t.Errorf("events %+v, want %+v", tr.events, want)
	}
	ctx := context.Background()
	hold, _ := g.Admit(ctx, 0, 0)
	s := contentionStats(m)
	if len(s) != 2 || s[0].Label != "" || s[0].AttemptCount != 0 {
		t.Fatalf("stats %+v, want the empty label, then x", s)
	}
	x := s[1]
	x.Wait = Histogram{}
	if want := (ContentionStats{Label: "x", Limiting: true, Limit: 1, Running: 1,
		AttemptCount: 201, ConflictCount: 200, CommitCount: 1}); fmt.Sprint(x) != fmt.Sprint(want) {
		t.Errorf("stats of x %+v, want %+v", x, want)
	}
	if w := s[1].Wait; w.Count != 2 || len(w.Bounds) != len(histogram.Bounds) || len(w.Buckets) != len(histogram.Bounds)+1 {
		t.Errorf("waits %+v, want the two admissions under the limit", w)
	}
	g.Done(ctx, hold, contention.Committed, time.Millisecond)
}

// TestContentionOutcome: a commit, a conflict and any other failure each
// count as such at the gate.
func TestContentionOutcome(t *testing.T) {
	tests := []struct {
		class Class
		want  contention.Outcome
	}{
		{classNone, contention.Committed},
		{ClassConflict, contention.Conflict},
		{ClassOverload, contention.Failed},
		{ClassUnavailable, contention.Failed},
		{ClassConnectionLost, contention.Failed},
		{ClassAmbiguous, contention.Failed},
		{ClassTimeout, contention.Failed},
		{ClassPermanent, contention.Failed},
	}
	for _, tt := range tests {
		if got := contentionOutcome(tt.class); got != tt.want {
			t.Errorf("contentionOutcome(%v) = %v, want %v", tt.class, got, tt.want)
		}
	}
}
