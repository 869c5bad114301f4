package breaker

import (
	"context"
	"testing"
	"time"
)

// TestTransitions walks a breaker through every state: concurrent probes
// beyond HalfOpenProbes are refused, the outcome of a call admitted before
// a change is stale, and every change is delivered once with its reason.
func TestTransitions(t *testing.T) {
	h := newHarness(t, with(func(s *Settings) { s.ConsecutiveFailures, s.HalfOpenProbes = 2, 2 }))
	ctx := context.Background()
	h.run(steps(2, fail))
	h.wantState(Open, "closed -> open")

	h.wait(5 * time.Second)
	h.wantState(HalfOpen, "open -> half-open after OpenFor")
	t1, err1 := h.b.allow(ctx)
	t2, err2 := h.b.allow(ctx)
	_, err3 := h.b.allow(ctx)
	if err1 != nil || err2 != nil || err3 != errOpen {
		t.Fatalf("half-open admission: %v %v %v; want two probes and a refusal", err1, err2, err3)
	}
	h.b.record(ctx, t1, outcome{counted: true, failed: true})
	h.wantState(Open, "half-open -> open: a probe failed")
	h.b.record(ctx, t2, outcome{counted: true})
	h.wantState(Open, "a probe admitted before the change is stale")

	h.wait(5 * time.Second)
	if err := h.call(time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	h.wantState(HalfOpen, "one of two probes succeeded")
	if err := h.call(time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	h.wantState(Closed, "half-open -> closed: both probes succeeded")

	want := []Change{
		{From: Closed, To: Open, Reason: "2 consecutive failures", Calls: 2, Failures: 2},
		// Opening keeps the window: it still holds the failures.
		{From: Open, To: HalfOpen, Reason: "open for 5s", Calls: 2, Failures: 2},
		{From: HalfOpen, To: Open, Reason: "half-open probe failed", Calls: 2, Failures: 2},
		{From: Open, To: HalfOpen, Reason: "open for 5s"}, // they have aged out
		{From: HalfOpen, To: Closed, Reason: "half-open probes succeeded"},
	}
	if len(h.changes) != len(want) {
		t.Fatalf("changes %+v\nwant    %+v", h.changes, want)
	}
	for i, w := range want {
		c := h.changes[i]
		if c.From != w.From || c.To != w.To || c.Reason != w.Reason || c.Calls != w.Calls || c.Failures != w.Failures || c.Slow != w.Slow {
			t.Errorf("change %d = %+v, want %+v", i, c, w)
		}
	}
	if s := h.b.Stats(); s != (Stats{State: Closed, Rejected: 1, Opened: 2}) {
		t.Errorf("stats %+v: opened twice, one refusal, a fresh window after closing", s)
	}
}

// TestReasons: the reason of each rule that opens the breaker, with the
// window's counts at the change.
func TestReasons(t *testing.T) {
	tests := []struct {
		name   string
		s      Settings
		script []step
		want   Change
	}{
		{"consecutive failures", with(func(s *Settings) { s.ConsecutiveFailures = 3 }), steps(3, fail),
			Change{From: Closed, To: Open, Reason: "3 consecutive failures", Calls: 3, Failures: 3}},
		{"failure ratio", with(func(s *Settings) { s.ConsecutiveFailures = 0 }), concat(steps(5, ok), steps(5, fail)),
			Change{From: Closed, To: Open, Reason: "failure ratio 5/10", Calls: 10, Failures: 5}},
		{"slow-call ratio", with(func(s *Settings) { s.ConsecutiveFailures, s.FailureRatio = 0, 0 }), concat(steps(5, ok), steps(5, step{took: time.Second})),
			Change{From: Closed, To: Open, Reason: "slow-call ratio 5/10 (>= 1s)", Calls: 10, Slow: 5}},
		{"no probes", with(func(s *Settings) { s.ConsecutiveFailures, s.HalfOpenProbes, s.OpenFor = 1, 0, 0 }), steps(1, fail),
			Change{From: Open, To: Closed, Reason: "open for 0s, no probes", Calls: 1, Failures: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.s)
			h.run(tt.script)
			h.b.State()
			if len(h.changes) == 0 || h.changes[len(h.changes)-1] != tt.want {
				t.Errorf("changes %+v, want the last %+v", h.changes, tt.want)
			}
		})
	}
}

// TestChangesOutsideTheLock: a change is delivered with the context of
// the call that made it (context.Background when time made it), after the
// lock is released, so the callback may ask the breaker its state.
func TestChangesOutsideTheLock(t *testing.T) {
	type key struct{}
	var h *harness
	var seen []State
	s := with(func(s *Settings) { s.ConsecutiveFailures = 1 })
	h = newHarness(t, s)
	inner := h.b.s.OnChange
	h.b.s.OnChange = func(ctx context.Context, c Change) {
		inner(ctx, c)
		seen = append(seen, h.b.State()) // would deadlock under the lock
	}
	ctx := context.WithValue(context.Background(), key{}, "call")
	_ = h.b.Do(ctx, func(context.Context) error { return errFail })
	h.wait(s.OpenFor)
	h.b.State()
	if len(h.ctxs) != 2 || h.ctxs[0].Value(key{}) != "call" || h.ctxs[1] != context.Background() {
		t.Errorf("contexts %v: want the call's, then context.Background", h.ctxs)
	}
	if len(seen) != 2 || seen[0] != Open || seen[1] != HalfOpen {
		t.Errorf("states seen from the callback %v, want [open half-open]", seen)
	}
}

// TestNoCallback: a breaker without OnChange changes state all the same.
func TestNoCallback(t *testing.T) {
	s := with(func(s *Settings) { s.ConsecutiveFailures = 1 })
	s.Judge, s.ErrOpen = judge, errOpen
	clk := &fakeClock{now: time.Unix(1000, 0)}
	b := New(s, clk)
	_ = b.Do(context.Background(), func(context.Context) error { return errFail })
	if st := b.Stats(); st.State != Open || st.Opened != 1 {
		t.Errorf("stats %+v, want open once", st)
	}
}

// TestStats: the window's counts, the refusals and the openings.
func TestStats(t *testing.T) {
	h := newHarness(t, with(func(s *Settings) {
		s.ConsecutiveFailures, s.FailureRatio, s.SlowCallRatio, s.SlowCallThreshold = 3, 0, 0, 100*time.Millisecond
	}))
	h.run(concat(steps(2, ok), steps(1, slow), steps(1, ignored), steps(2, fail)))
	if s := h.b.Stats(); s != (Stats{State: Closed, Calls: 5, Failures: 2, Slow: 1}) {
		t.Errorf("closed: %+v", s)
	}
	h.run(concat(steps(1, fail), steps(3, ok)))
	if s := h.b.Stats(); s != (Stats{State: Open, Calls: 6, Failures: 3, Slow: 1, Rejected: 3, Opened: 1}) {
		t.Errorf("open: %+v", s)
	}
	h.wait(11 * time.Second)
	if s := h.b.Stats(); s != (Stats{State: HalfOpen, Rejected: 3, Opened: 1}) {
		t.Errorf("half-open, the window gone by: %+v", s)
	}
}

// TestPanickingProbe: a half-open probe that panics counts as the probe's
// failure and frees its slot; the panic still propagates. Before, the slot
// stayed taken and the breaker refused every call forever.
func TestPanickingProbe(t *testing.T) {
	h := newHarness(t, with(func(s *Settings) { s.ConsecutiveFailures, s.FailureRatio, s.SlowCallRatio = 1, 0, 0 }))
	h.run(steps(1, fail))
	h.wait(h.b.s.OpenFor)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the probe's own panic", r)
			}
		}()
		_ = h.b.Do(context.Background(), func(context.Context) error { panic("boom") })
	}()
	h.wantState(Open, "after a panicking probe (the probe failed)")
	h.wait(10 * h.b.s.OpenFor)
	if err := h.call(time.Millisecond, nil); err != nil {
		t.Fatalf("a healthy call after 10x OpenFor: %v; the breaker is wedged", err)
	}
	h.wantState(Closed, "after a healthy probe")
}

// TestDoesNotAllocate: a call through a closed breaker and a refusal by an
// open one cost no allocation.
func TestDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	closed := newHarness(t, defaults).b
	open := newHarness(t, with(func(s *Settings) { s.ConsecutiveFailures, s.OpenFor = 1, time.Hour })).b
	_ = open.Do(ctx, func(context.Context) error { return errFail })
	for name, b := range map[string]*Breaker{"closed": closed, "open": open} {
		if n := testing.AllocsPerRun(100, func() { _ = b.Do(ctx, fn) }); n != 0 {
			t.Errorf("%s: %v allocations per call", name, n)
		}
	}
}

func BenchmarkOpenRejects(b *testing.B) {
	s := with(func(s *Settings) { s.ConsecutiveFailures, s.OpenFor = 1, time.Hour })
	s.Judge, s.ErrOpen = judge, errOpen
	br := New(s, &fakeClock{now: time.Unix(1000, 0)})
	_ = br.Do(context.Background(), func(context.Context) error { return errFail })
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := br.Do(context.Background(), fn); err != errOpen {
			b.Fatal(err)
		}
	}
}
