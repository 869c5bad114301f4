package retry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/fakeclock"
)

var t0 = time.Unix(1000, 0)

// TestLoopStops is the table of how a call ends: how many attempts it
// makes on a script of errors, and what the loop says about why it made no
// more (the caps, the classes switched off, an unreachable server), or
// that it returns the error as it is.
func TestLoopStops(t *testing.T) {
	maxRetries := func(n int) func(*Loop) { return func(l *Loop) { l.Policy.MaxRetries = n } }
	adaptive := func(n int) func(*Loop) { return func(l *Loop) { l.Policy.MaxAdaptiveRetries = n } }
	unavailableOff := func(l *Loop) { l.Policy.UnavailableTimeout = 0 }
	capped := func(limit string, n int) Why { return Why{Stop: CapReached, Reason: limit, Limit: limit, Cap: n} }
	unreachable := func(w Why) Why { w.Unreachable = true; return w }
	tests := []struct {
		name     string
		set      func(*Loop)
		errs     []error
		attempts int
		plain    bool // the last error is returned as it is (nil after a success)
		why      Why
	}{
		{name: "success at once", attempts: 1, plain: true},
		{name: "conflicts retried, then success", errs: repeat(conflict, 3), attempts: 4, plain: true},
		{name: "lost connections retried, then success", errs: []error{lost, lost}, attempts: 3, plain: true},
		{name: "conflicts capped at MaxRetries", errs: repeat(conflict, 20), attempts: 11, why: capped("MaxRetries", 10)},
		{name: "MaxRetries 3", set: maxRetries(3), errs: repeat(lost, 20), attempts: 4, why: capped("MaxRetries", 3)},
		{name: "MaxRetries off", set: maxRetries(0), errs: repeat(conflict, 20), attempts: 1, why: capped("MaxRetries", 0)},
		{name: "overloads capped at MaxAdaptiveRetries", errs: repeat(overload, 20), attempts: 3, why: capped("MaxAdaptiveRetries", 2)},
		{name: "MaxAdaptiveRetries 5", set: adaptive(5), errs: repeat(overload, 20), attempts: 6, why: capped("MaxAdaptiveRetries", 5)},
		{name: "MaxAdaptiveRetries off", set: adaptive(0), errs: repeat(overload, 20), attempts: 1, why: capped("MaxAdaptiveRetries", 0)},
		{name: "an overload makes MaxAdaptiveRetries the cap", errs: append([]error{overload}, repeat(conflict, 20)...), attempts: 3, why: capped("MaxAdaptiveRetries", 2)},
		{name: "conflicts, then overloads: the cap counts every retry", errs: append(repeat(conflict, 4), overload, overload), attempts: 5, why: capped("MaxAdaptiveRetries", 2)},
		{name: "the overload cap sticks after conflicts", set: adaptive(3), errs: []error{overload, conflict, conflict, conflict, conflict}, attempts: 4, why: capped("MaxAdaptiveRetries", 3)},
		{name: "overloads off stay off after a conflict", set: adaptive(0), errs: []error{conflict, overload, overload}, attempts: 2, why: capped("MaxAdaptiveRetries", 0)},
		{name: "permanent: not retried", errs: []error{permanent}, attempts: 1, plain: true},
		{name: "timeout: not retried", errs: []error{timeout}, attempts: 1, plain: true},
		{name: "ambiguous: not retried", errs: []error{ambiguous}, attempts: 1, plain: true},
		{name: "not retryable after retries", errs: []error{conflict, conflict, permanent}, attempts: 3, why: Why{Stop: NotRetryable, Reason: "not retryable"}},
		{name: "unavailable: outside the caps", set: func(l *Loop) { l.Policy.MaxRetries, l.Policy.MaxAdaptiveRetries = 0, 0 }, errs: repeat(unavailable, 3), attempts: 4, plain: true},
		{name: "unavailable, then conflicts: MaxRetries still 10", errs: append(repeat(unavailable, 6), repeat(conflict, 20)...), attempts: 17, why: capped("MaxRetries", 10)},
		{name: "UnavailableTimeout: the bound", errs: repeat(unavailable, 100), attempts: 13,
			why: Why{Stop: Unreachable, Reason: "UnavailableTimeout", Unreachable: true, UnreachableFor: 15 * time.Second, Bound: 15 * time.Second}},
		{name: "UnavailableTimeout off", set: unavailableOff, errs: repeat(unavailable, 100), attempts: 1, why: unreachable(capped("UnavailableTimeout", 0))},
		{name: "UnavailableTimeout off, after conflicts", set: unavailableOff, errs: []error{conflict, conflict, unavailable}, attempts: 3, why: unreachable(capped("UnavailableTimeout", 0))},
		{name: "an overload where a host refused: unreachable", errs: repeat(refusedAndBusy, 100), attempts: 3, why: unreachable(capped("MaxAdaptiveRetries", 2))},
		{name: "the same, MaxAdaptiveRetries off", set: adaptive(0), errs: repeat(refusedAndBusy, 100), attempts: 1, why: unreachable(capped("MaxAdaptiveRetries", 0))},
		{name: "refusals, then overloads from a server that answers", errs: append(repeat(unavailable, 3), repeat(overload, 10)...), attempts: 6, why: capped("MaxAdaptiveRetries", 2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLoop(&fakeclock.Clock{T: t0})
			if tt.set != nil {
				tt.set(l)
			}
			calls := 0
			err := l.Run(context.Background(), scripted(&calls, tt.errs...))
			if calls != tt.attempts {
				t.Errorf("attempts %d, want %d", calls, tt.attempts)
			}
			var last error
			if calls <= len(tt.errs) {
				last = tt.errs[calls-1]
			}
			if tt.plain {
				if err != last {
					t.Errorf("err %v, want %v as it is", err, last)
				}
				return
			}
			var s *stopped
			if !errors.As(err, &s) || s.err != last || s.attempts != calls || s.why != tt.why {
				t.Errorf("err %v\nwant %v", err, &stopped{last, tt.attempts, tt.why})
			}
		})
	}
}

// TestLoopClassOffStaysOff: once an overload was seen MaxAdaptiveRetries
// caps every retry, but a class the caller switched off is not retried.
func TestLoopClassOffStaysOff(t *testing.T) {
	calls := 0
	l := newLoop(&fakeclock.Clock{T: t0})
	l.Policy.MaxRetries = 0
	_ = l.Run(context.Background(), scripted(&calls, overload, conflict, conflict))
	if calls != 2 {
		t.Errorf("conflicts off, a conflict after an overload: %d attempts, want 2", calls)
	}
}

// TestLoopPauses: the pause before each retry, by class, jitter and cap.
func TestLoopPauses(t *testing.T) {
	ms := func(ds ...float64) []time.Duration {
		out := make([]time.Duration, len(ds))
		for i, d := range ds {
			out[i] = time.Duration(d * float64(time.Millisecond))
		}
		return out
	}
	nan := 0.0
	tests := []struct {
		name     string
		jitter   float64
		adaptive int
		errs     []error
		want     []time.Duration
	}{
		{"overload: 100ms * 2^n", 1, 4, repeat(overload, 10), ms(200, 400, 800, 1600)},
		{"overload, jitter 0.5", 0.5, 4, repeat(overload, 10), ms(100, 200, 400, 800)},
		{"jitter 0: no pause", 0, 4, repeat(overload, 10), ms(0, 0, 0, 0)},
		// The Client Backpressure specification's timing test: the two
		// retries cost 0.6s with a jitter of 1, nothing with 0.
		{"the specification's two retries", 1, 2, repeat(overload, 10), ms(200, 400)},
		{"a negative jitter is 0", -3, 1, repeat(overload, 5), ms(0)},
		{"a jitter above 1 is 1", 7, 1, repeat(overload, 5), ms(200)},
		{"a NaN jitter is 0", nan / nan, 1, repeat(overload, 5), ms(0)},
		{"conflicts: 5ms * 2^n, at most 500ms", 1, 2, repeat(conflict, 50), ms(10, 20, 40, 80, 160, 320, 500, 500, 500, 500)},
		{"unavailable: the overload's backoff, past MaxAdaptiveRetries", 1, 2, repeat(unavailable, 5), ms(200, 400, 800, 1600, 3200)},
		{"unavailable retries counted apart", 1, 5, []error{conflict, conflict, unavailable, unavailable, unavailable, overload, conflict},
			ms(10, 20, 200, 400, 800, 800, 80)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeclock.Clock{T: t0}
			l := newLoop(clk)
			l.Policy.Jitter, l.Policy.MaxAdaptiveRetries = jitter(tt.jitter), tt.adaptive
			calls := 0
			_ = l.Run(context.Background(), scripted(&calls, tt.errs...))
			if !slices.Equal(clk.Sleeps, tt.want) {
				t.Errorf("pauses %v, want %v", clk.Sleeps, tt.want)
			}
			if len(clk.Sleeps) != calls-1 {
				t.Errorf("%d pauses for %d attempts: want one per retry", len(clk.Sleeps), calls)
			}
		})
	}
}

// TestLoopDeadline: a retry whose pause would end past the deadline is not
// made, and the call returns while the caller still has time, without
// matching the deadline; an unreachable server is retried until the
// deadline, which ends the call with the context's error.
func TestLoopDeadline(t *testing.T) {
	t.Run("a pause past the deadline", func(t *testing.T) {
		deadline := time.Now().Add(time.Hour)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		for _, tt := range []struct {
			jitter float64
			want   []time.Duration
		}{{1, nil}, {0.5, []time.Duration{100 * time.Millisecond}}} {
			clk := &fakeclock.Clock{T: deadline.Add(-150 * time.Millisecond)}
			l := newLoop(clk)
			l.Policy.Jitter = jitter(tt.jitter)
			calls := 0
			err := l.Run(ctx, scripted(&calls, repeat(overload, 5)...))
			var s *stopped
			if calls != len(tt.want)+1 || !slices.Equal(clk.Sleeps, tt.want) || !errors.As(err, &s) || s.why.Stop != Deadline || s.why.Reason != "deadline" {
				t.Errorf("jitter %v: %d attempts, pauses %v, %v; want %d, %v and the deadline", tt.jitter, calls, clk.Sleeps, err, len(tt.want)+1, tt.want)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("jitter %v: %v matches the deadline, which has not passed", tt.jitter, err)
			}
		}
	})
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	for _, tt := range []struct {
		name     string
		deadline time.Duration
		want     []time.Duration
	}{
		{"unavailable until the deadline", 10 * time.Second, []time.Duration{ms(200), ms(400), ms(800), ms(1600), ms(3200), // 2^n * 100ms
			ms(1900), ms(950), ms(475), ms(237.5), ms(118.75), // half the time left
			ms(118.75)}}, // half of it is under 100ms: wait for the deadline
		{"a deadline before the first pause ends", 150 * time.Millisecond, []time.Duration{ms(150)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeclock.Clock{T: t0}
			calls := 0
			err := newLoop(clk).Run(fakeclock.Deadline(clk, tt.deadline), scripted(&calls, repeat(unavailable, 1000)...))
			want := Why{Stop: ContextEnded, Reason: "context", Unreachable: true, UnreachableFor: tt.deadline}
			var s *stopped
			if !slices.Equal(clk.Sleeps, tt.want) || calls != len(tt.want) || !errors.As(err, &s) || s.why != want || s.attempts != calls {
				t.Errorf("%d attempts, pauses %v, %v\nwant %d, %v, %+v", calls, clk.Sleeps, err, len(tt.want), tt.want, want)
			}
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, unavailable) {
				t.Errorf("%v: want it to match the deadline and the last error", err)
			}
		})
	}
	t.Run("the deadline passed by the clock first", func(t *testing.T) {
		deadline := time.Now().Add(time.Hour)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		clk := &fakeclock.Clock{T: deadline.Add(-time.Second)}
		calls := 0
		err := newLoop(clk).Run(ctx, func(context.Context) (classify.Class, error) {
			if calls++; calls == 2 {
				clk.T = deadline.Add(time.Millisecond)
			}
			return classify.Unavailable, unavailable
		})
		if calls != 2 || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, unavailable) {
			t.Errorf("%d attempts, %v: want 2, matching the deadline and the last error", calls, err)
		}
		if e := pastDeadline(err); e != err {
			t.Errorf("pastDeadline wrapped %v again", err)
		}
	})
}

// TestLoopBudget: overload and lost-connection retries draw on the budget,
// and a refusal ends the call at once, before its deadline; conflict
// retries never draw on it, and an unavailable server's are paced by it
// (TestLoopBudgetPacesUnavailable); a success pays for later retries.
func TestLoopBudget(t *testing.T) {
	tests := []struct {
		name      string
		successes int
		errs      []error
		attempts  int
		refused   bool
	}{
		{"an empty budget: no overload retry", 0, repeat(overload, 2), 1, true},
		{"an empty budget: no lost-connection retry", 0, repeat(lost, 2), 1, true},
		{"an empty budget: conflicts still retried", 0, repeat(conflict, 5), 6, false},
		{"10 successes pay for 2 retries", 10, repeat(overload, 5), 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBudget(0.2, 0, 10*time.Second, t0)
			for range tt.successes {
				b.Success(t0)
			}
			clk := &fakeclock.Clock{T: t0}
			l := newLoop(clk)
			l.Budget, l.Policy.MaxAdaptiveRetries = b, 5
			calls := 0
			err := l.Run(fakeclock.Deadline(clk, 10*time.Second), scripted(&calls, tt.errs...))
			var s *stopped
			if calls != tt.attempts || (errors.As(err, &s) && s.why.Stop == BudgetSpent && s.why.Reason == "budget") != tt.refused {
				t.Errorf("%d attempts, %v; want %d, refused %v", calls, err, tt.attempts, tt.refused)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v matches the deadline", err)
			}
		})
	}
	t.Run("a success pays", func(t *testing.T) {
		b := NewBudget(1, 0, 10*time.Second, t0)
		l := newLoop(&fakeclock.Clock{T: t0})
		l.Budget = b
		calls := 0
		if err := l.Run(context.Background(), scripted(&calls)); err != nil || !b.Withdraw(t0) || b.Withdraw(t0) {
			t.Errorf("%v; want one retry paid by the success", err)
		}
	})
}

// TestLoopBudgetPacesUnavailable: the retries of a server that cannot be
// reached draw on the budget, which paces them and never ends the call:
// with a budget spent at once, each pause is the budget's wait for its next
// token when that is longer than the backoff, and the call ends at its
// deadline, with the deadline's error, never "budget". With successes or a
// full bucket to pay for them, the backoff alone paces them.
func TestLoopBudgetPacesUnavailable(t *testing.T) {
	tests := []struct {
		name       string
		floor      float64
		successes  int
		wantSleeps []time.Duration
	}{
		// Jitter 1: backoffs of 200ms, 400ms, 800ms, ... cut to half the time
		// left of the 3s deadline.
		{"no floor: the backoff", 0, 0, unpaced},
		{"successes pay: the backoff", 0, 50, unpaced},
		{"a floor that keeps up: the backoff", 2, 0, unpaced},
		// A floor of 0.5 per second: a bucket of one token, lent one ahead.
		// The first retry takes the token; the second waits 1.8s for the
		// one it borrows (0.1 was back after 200ms), the third 2s, which
		// the deadline ends.
		{"a floor of 0.5/s paces", 0.5, 0, []time.Duration{ms(200), ms(1800), ms(1000)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBudget(0.2, tt.floor, 10*time.Second, t0)
			for range tt.successes {
				b.Success(t0)
			}
			clk := &fakeclock.Clock{T: t0}
			l := newLoop(clk)
			l.Budget = b
			l.Policy.UnavailableTimeout = time.Minute
			calls := 0
			err := l.Run(fakeclock.Deadline(clk, 3*time.Second), scripted(&calls, repeat(unavailable, 1000)...))
			if fmt.Sprint(clk.Sleeps) != fmt.Sprint(tt.wantSleeps) {
				t.Errorf("sleeps %v\nwant   %v", clk.Sleeps, tt.wantSleeps)
			}
			var s *stopped
			if !errors.As(err, &s) || s.why.Stop == BudgetSpent || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v: want the call ended by its deadline, not the budget", err)
			}
		})
	}
}

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// unpaced are the pauses of TestLoopBudgetPacesUnavailable's call when the
// budget does not pace it: 200ms, 400ms, 800ms, then half the time left,
// then the wait for the deadline.
var unpaced = []time.Duration{ms(200), ms(400), ms(800), ms(800), ms(400), ms(200), ms(100), ms(100)}

// TestLoopContext: a call the context ended matches its error when the
// attempt failed with a class the loop would have retried, or timed out;
// an ambiguous COMMIT or a permanent error keeps its own. After a single
// attempt the error is returned as it is, after more the loop says the
// context ended the call.
func TestLoopContext(t *testing.T) {
	for _, tt := range []struct {
		err      error
		attempts int
		matches  bool
	}{
		{conflict, 1, true}, {unavailable, 1, true}, {timeout, 1, true}, {ambiguous, 1, false}, {permanent, 1, false},
		{conflict, 2, true},
	} {
		t.Run(fmt.Sprintf("%v, attempt %d", tt.err, tt.attempts), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			calls := 0
			err := newLoop(&fakeclock.Clock{T: t0}).Run(ctx, func(context.Context) (classify.Class, error) {
				if calls++; calls == tt.attempts {
					cancel() // the caller gives up while the attempt ends
				}
				return classOf(tt.err), tt.err
			})
			if calls != tt.attempts || errors.Is(err, context.Canceled) != tt.matches || !errors.Is(err, tt.err) {
				t.Errorf("%d attempts, %v; want %d, matching context.Canceled %v, and the attempt's error", calls, err, tt.attempts, tt.matches)
			}
			var s *stopped
			unreachable := tt.err == unavailable
			if stopped := errors.As(err, &s); stopped != (tt.attempts > 1 || unreachable) ||
				stopped && (s.why != Why{Stop: ContextEnded, Reason: "context", Unreachable: unreachable}) {
				t.Errorf("%v: the loop's word on it is wrong", err)
			}
		})
	}
}
