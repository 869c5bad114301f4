package breaker

import (
	"context"
	"testing"
	"time"
)

var (
	ok      = step{took: time.Millisecond}
	fail    = step{took: time.Millisecond, err: errFail}
	ignored = step{took: time.Millisecond, err: errIgnored}
	slow    = step{took: 150 * time.Millisecond}
)

// TestRules: each rule opens a closed breaker when its count is reached,
// and not before; a rule that is 0 is off.
func TestRules(t *testing.T) {
	onlyConsecutive := func(n int) Settings {
		return with(func(s *Settings) { s.ConsecutiveFailures, s.FailureRatio, s.SlowCallRatio = n, 0, 0 })
	}
	onlyFailureRatio := with(func(s *Settings) { s.ConsecutiveFailures, s.SlowCallRatio = 0, 0 })
	onlySlowRatio := with(func(s *Settings) {
		s.ConsecutiveFailures, s.FailureRatio, s.SlowCallThreshold = 0, 0, 100*time.Millisecond
	})
	tests := []struct {
		name     string
		s        Settings
		script   []step
		wantOpen bool
	}{
		{"consecutive failures reached", onlyConsecutive(3), steps(3, fail), true},
		{"a success resets the run", onlyConsecutive(3), concat(steps(2, fail), steps(1, ok), steps(2, fail)), false},
		{"uncounted calls do not break the run", onlyConsecutive(3), concat(steps(2, fail), steps(1, ignored), steps(1, fail)), true},
		{"consecutive rule off", onlyConsecutive(0), steps(50, fail), false},
		{"failure ratio reached", onlyFailureRatio, concat(steps(5, ok), steps(5, fail)), true},
		{"failure ratio below it", onlyFailureRatio, concat(steps(6, ok), steps(4, fail)), false},
		{"failure ratio below MinCalls", onlyFailureRatio, steps(9, fail), false},
		{"failure ratio with no minimum", with(func(s *Settings) { s.ConsecutiveFailures, s.SlowCallRatio, s.MinCalls = 0, 0, 0 }), steps(1, fail), true},
		{"failures age out of the window", onlyFailureRatio, concat(steps(5, fail), []step{{wait: 11 * time.Second, took: time.Millisecond}}, steps(5, ok)), false},
		{"uncounted calls are not in the window", onlyFailureRatio, concat(steps(5, fail), steps(20, ignored)), false},
		{"failure ratio off", with(func(s *Settings) { s.ConsecutiveFailures, s.FailureRatio, s.SlowCallRatio = 0, 0, 0 }), steps(50, fail), false},
		{"slow-call ratio: slow successes open it", onlySlowRatio, concat(steps(5, ok), steps(5, slow)), true},
		{"slow-call ratio below it", onlySlowRatio, concat(steps(6, ok), steps(4, slow)), false},
		{"slow-call ratio off", with(func(s *Settings) {
			s.ConsecutiveFailures, s.FailureRatio, s.SlowCallRatio, s.SlowCallThreshold = 0, 0, 0, time.Millisecond
		}), steps(50, slow), false},
		{"no threshold: nothing is slow", with(func(s *Settings) {
			s.ConsecutiveFailures, s.FailureRatio, s.SlowCallThreshold, s.MinCalls = 0, 0, 0, 1
		}), steps(20, step{took: time.Hour}), false},
		{"an uncounted slow call is not slow", onlySlowRatio, concat(steps(10, ok), steps(20, step{took: time.Hour, err: errIgnored})), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.s)
			h.run(tt.script)
			want := Closed
			if tt.wantOpen {
				want = Open
			}
			h.wantState(want, "after the script")
		})
	}
}

// TestHalfOpen: an open breaker lets HalfOpenProbes calls through once
// OpenFor has passed; they close it when all succeed without being slow,
// the first that fails or is slow opens it again, and one that tells
// nothing frees its slot.
func TestHalfOpen(t *testing.T) {
	base := with(func(s *Settings) {
		s.ConsecutiveFailures, s.FailureRatio, s.SlowCallRatio, s.SlowCallThreshold, s.HalfOpenProbes = 1, 0, 0, 100*time.Millisecond, 2
	})
	tests := []struct {
		name   string
		s      Settings
		probes []step
		want   State
	}{
		{"all probes succeed", base, steps(2, ok), Closed},
		{"one probe succeeded: still half-open", base, steps(1, ok), HalfOpen},
		{"a probe fails", base, []step{ok, fail}, Open},
		{"a probe is slow", base, []step{slow}, Open},
		{"a probe that tells nothing frees its slot", base, []step{ignored, ignored, ok, ok}, Closed},
		{"no probes: closes once OpenFor passed", with(func(s *Settings) { s.ConsecutiveFailures, s.HalfOpenProbes = 1, 0 }), nil, Closed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.s)
			h.run(steps(1, fail))
			h.wantState(Open, "after the failure")
			h.wait(tt.s.OpenFor)
			h.run(tt.probes)
			h.wantState(tt.want, "after the probes")
		})
	}
}

// TestOpenFor: an open breaker refuses every call, without running it,
// until OpenFor has passed; with no OpenFor the next call is a probe.
func TestOpenFor(t *testing.T) {
	tests := []struct {
		name     string
		openFor  time.Duration
		waited   time.Duration
		wantOpen bool
	}{
		{"before OpenFor", 5 * time.Second, 5*time.Second - 1, true},
		{"at OpenFor", 5 * time.Second, 5 * time.Second, false},
		{"no OpenFor", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, with(func(s *Settings) { s.ConsecutiveFailures, s.OpenFor = 1, tt.openFor }))
			h.run(steps(1, fail))
			h.wait(tt.waited)
			ran := false
			err := h.b.Do(t.Context(), func(ctx context.Context) error { ran = true; return nil })
			if refused := err == errOpen; refused != tt.wantOpen || ran == tt.wantOpen {
				t.Errorf("err %v, ran %v; want refused %v, without running it", err, ran, tt.wantOpen)
			}
		})
	}
}
