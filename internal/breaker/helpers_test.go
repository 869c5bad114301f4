package breaker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The errors of the tests' calls, judged by judge.
var (
	errFail    = errors.New("the service failed")
	errIgnored = errors.New("the caller's own error")
	errOpen    = errors.New("open")
)

// judge counts a success, counts errIgnored not at all, and counts every
// other error as a failure.
func judge(_ context.Context, err error) (counted, failed bool) {
	switch {
	case err == nil:
		return true, false
	case errors.Is(err, errIgnored):
		return false, false
	}
	return true, true
}

// fakeClock is a clock that moves only when a test moves it.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// defaults are the settings a pool's breaker gets from a zero BreakerConfig.
var defaults = Settings{
	ConsecutiveFailures: 5,
	FailureRatio:        0.5,
	SlowCallRatio:       0.5,
	SlowCallThreshold:   time.Second,
	MinCalls:            10,
	Window:              10 * time.Second,
	OpenFor:             5 * time.Second,
	HalfOpenProbes:      1,
}

// harness is a breaker on a fake clock, with the changes it delivered.
type harness struct {
	t       *testing.T
	b       *Breaker
	clk     *fakeClock
	changes []Change
	ctxs    []context.Context
}

// newHarness returns a breaker with s (Judge, ErrOpen and OnChange filled
// in) on a fake clock.
func newHarness(t *testing.T, s Settings) *harness {
	t.Helper()
	h := &harness{t: t, clk: &fakeClock{now: time.Unix(1000, 0)}}
	s.Judge, s.ErrOpen = judge, errOpen
	s.OnChange = func(ctx context.Context, c Change) {
		h.changes = append(h.changes, c)
		h.ctxs = append(h.ctxs, ctx)
	}
	h.b = New(s, h.clk)
	return h
}

// call runs one call through the breaker that takes d on the fake clock
// and ends with err; it returns the breaker's error.
func (h *harness) call(d time.Duration, err error) error {
	return h.b.Do(context.Background(), func(context.Context) error {
		h.clk.now = h.clk.now.Add(d)
		return err
	})
}

// wait moves the clock on by d.
func (h *harness) wait(d time.Duration) { h.clk.now = h.clk.now.Add(d) }

// wantState fails the test when the breaker is not in want.
func (h *harness) wantState(want State, why string) {
	h.t.Helper()
	if got := h.b.State(); got != want {
		h.t.Errorf("%s: state %s, want %s (stats %+v)", why, name(got), name(want), h.b.Stats())
	}
}

// step is one call of a script: after wait, a call that takes took and
// ends with err.
type step struct {
	wait, took time.Duration
	err        error
}

// steps repeats s n times.
func steps(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// concat joins scripts.
func concat(scripts ...[]step) []step {
	var out []step
	for _, s := range scripts {
		out = append(out, s...)
	}
	return out
}

// run plays a script.
func (h *harness) run(script []step) {
	for _, s := range script {
		h.wait(s.wait)
		_ = h.call(s.took, s.err)
	}
}

// with returns defaults changed by f.
func with(f func(s *Settings)) Settings {
	s := defaults
	f(&s)
	return s
}

// name names a state in test messages.
func name(s State) string { return [...]string{"closed", "half-open", "open"}[s] }
