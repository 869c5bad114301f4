package retry

import (
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/internal/classify"
)

func TestBackoffCap(t *testing.T) {
	tests := []struct {
		attempt int
		want    time.Duration
	}{
		{1, 200 * time.Millisecond},
		{6, 6400 * time.Millisecond},
		{7, 10 * time.Second},
		{40, 10 * time.Second},
		{100, 10 * time.Second},
		{1 << 30, 10 * time.Second},
	}
	for _, tt := range tests {
		if got := Backoff(1, 100*time.Millisecond, 10*time.Second, tt.attempt); got != tt.want {
			t.Errorf("Backoff(attempt %d) = %v, want %v", tt.attempt, got, tt.want)
		}
	}
}

func one() float64 { return 1 }

// TestNext is the retry decision table: each class, the caps and their
// switching off, the overload cap that sticks, the deadline, and an
// unreachable server's bound.
func TestNext(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := Policy{MaxAdaptiveRetries: 2, UnavailableTimeout: 15 * time.Second, Jitter: one,
		BaseBackoff: 100 * time.Millisecond, MaxBackoff: 10 * time.Second,
		ConflictBaseBackoff: 5 * time.Millisecond, ConflictMaxBackoff: 500 * time.Millisecond}
	type step struct {
		c    classify.Class
		want Decision
	}
	tests := []struct {
		name       string
		policy     func(p Policy) Policy
		maxRetries int
		deadline   time.Duration // 0: none
		steps      []step
	}{
		{name: "not retryable", maxRetries: 10, steps: []step{
			{classify.Permanent, Decision{Stop: NotRetryable}},
			{classify.Timeout, Decision{Stop: NotRetryable}},
			{classify.Ambiguous, Decision{Stop: NotRetryable}},
		}},
		{name: "conflicts up to MaxRetries", maxRetries: 2, steps: []step{
			{classify.Conflict, Decision{Retry: true, Backoff: 10 * time.Millisecond}},
			{classify.ConnectionLost, Decision{Retry: true, Backoff: 20 * time.Millisecond}},
			{classify.Conflict, Decision{Stop: CapReached}},
		}},
		{name: "an overload makes MaxAdaptiveRetries the cap", maxRetries: 10, steps: []step{
			{classify.Conflict, Decision{Retry: true, Backoff: 10 * time.Millisecond}},
			{classify.Overload, Decision{Retry: true, Backoff: 400 * time.Millisecond}},
			{classify.Conflict, Decision{Stop: CapReached}},
		}},
		{name: "overload switched off", policy: func(p Policy) Policy { p.MaxAdaptiveRetries = 0; return p }, maxRetries: 10, steps: []step{
			{classify.Overload, Decision{Stop: CapReached}},
		}},
		{name: "conflicts switched off", maxRetries: 0, steps: []step{
			{classify.Conflict, Decision{Stop: CapReached}},
			{classify.Overload, Decision{Retry: true, Backoff: 200 * time.Millisecond}},
		}},
		{name: "a backoff past the deadline", maxRetries: 10, deadline: 300 * time.Millisecond, steps: []step{
			{classify.Overload, Decision{Retry: true, Backoff: 200 * time.Millisecond}},
			{classify.Overload, Decision{Stop: Deadline}},
		}},
		{name: "unavailable: outside the caps, paced by the overload backoff", maxRetries: 0, steps: []step{
			{classify.Unavailable, Decision{Retry: true, Backoff: 200 * time.Millisecond}},
			{classify.Unavailable, Decision{Retry: true, Backoff: 400 * time.Millisecond}},
			{classify.Conflict, Decision{Stop: CapReached}},
		}},
		{name: "unavailable switched off", policy: func(p Policy) Policy { p.UnavailableTimeout = 0; return p }, maxRetries: 10, steps: []step{
			{classify.Unavailable, Decision{Stop: CapReached}},
		}},
		{name: "unavailable near the deadline: wait until past it", maxRetries: 10, deadline: 150 * time.Millisecond, steps: []step{
			{classify.Unavailable, Decision{Retry: true, Backoff: 250 * time.Millisecond}},
		}},
		{name: "unavailable: half the time left", maxRetries: 10, deadline: time.Second, steps: []step{
			{classify.Unavailable, Decision{Retry: true, Backoff: 200 * time.Millisecond}},
			{classify.Unavailable, Decision{Retry: true, Backoff: 400 * time.Millisecond}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := p
			if tt.policy != nil {
				pol = tt.policy(p)
			}
			pol.MaxRetries = tt.maxRetries
			var st State
			deadline, has := t0.Add(tt.deadline), tt.deadline > 0
			for i, s := range tt.steps {
				if got := pol.Next(&st, s.c, t0, deadline, has); got != s.want {
					t.Errorf("step %d (class %d): %+v, want %+v", i, s.c, got, s.want)
				}
			}
		})
	}
}

// TestUnavailableBound: an unreachable server is retried until
// UnavailableTimeout after the first such error, then the call stops; at a
// deadline before that bound the context ends it.
func TestUnavailableBound(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := Policy{UnavailableTimeout: time.Second, Jitter: one, BaseBackoff: 100 * time.Millisecond, MaxBackoff: 10 * time.Second}
	var st State
	now := t0
	for range 100 {
		d := p.Next(&st, classify.Unavailable, now, time.Time{}, false)
		if !d.Retry {
			if d.Stop != Unreachable || now.Sub(t0) < time.Second {
				t.Fatalf("stopped at +%v with %v, want Unreachable at +1s", now.Sub(t0), d.Stop)
			}
			return
		}
		now = now.Add(d.Backoff)
	}
	t.Fatal("never stopped")
}

func TestUnavailablePastDeadlineEndsByContext(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := Policy{UnavailableTimeout: time.Minute, Jitter: one, BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	st := State{UnavailableSince: t0}
	if d := p.Next(&st, classify.Unavailable, t0.Add(2*time.Second), t0.Add(time.Second), true); d.Retry || d.Stop != ContextEnded {
		t.Errorf("past the deadline by the clock: %+v, want ContextEnded", d)
	}
}

func TestClassSets(t *testing.T) {
	for c := classify.None; c <= classify.Permanent; c++ {
		retryable := c == classify.Conflict || c == classify.Overload || c == classify.Unavailable || c == classify.ConnectionLost
		if Retryable(c) != retryable {
			t.Errorf("Retryable(%d) = %v", c, Retryable(c))
		}
		if Budgeted(c) != (retryable && c != classify.Conflict) {
			t.Errorf("Budgeted(%d) = %v", c, Budgeted(c))
		}
		if Adaptive(c) != (c == classify.Overload || c == classify.Unavailable) {
			t.Errorf("Adaptive(%d) = %v", c, Adaptive(c))
		}
	}
	for _, j := range []float64{-1, 2, 0.5} {
		if c := clampJitter(j); c < 0 || c > 1 {
			t.Errorf("clampJitter(%v) = %v", j, c)
		}
	}
	nan := 0.0
	if c := clampJitter(nan / nan); c != 0 {
		t.Errorf("clampJitter(NaN) = %v", c)
	}
}
