package retry

import (
	"time"

	"github.com/pgtx-go/pgtx/internal/classify"
)

// Policy is a call's retry settings, defaults applied: the fields of
// pgtx.RetryConfig that decide a retry.
type Policy struct {
	// MaxRetries caps the conflict and lost-connection retries (0: off).
	MaxRetries          int
	MaxAdaptiveRetries  int
	UnavailableTimeout  time.Duration
	Jitter              func() float64
	BaseBackoff         time.Duration
	MaxBackoff          time.Duration
	ConflictBaseBackoff time.Duration
	ConflictMaxBackoff  time.Duration
}

// Retryable reports whether a transaction runs again after an error of
// class c.
func Retryable(c classify.Class) bool {
	return c == classify.Conflict || c == classify.Overload || c == classify.Unavailable || c == classify.ConnectionLost
}

// Adaptive reports the classes paced by the Client Backpressure
// specification's backoff (BaseBackoff, MaxBackoff). Only an overload sets
// the MaxAdaptiveRetries cap that sticks; an unavailable server is retried
// until the deadline or UnavailableTimeout.
func Adaptive(c classify.Class) bool { return c == classify.Overload || c == classify.Unavailable }

// Budgeted reports whether retries of class c draw on the retry budget: all
// but conflict retries. Those of an unavailable server are paced by it
// ([Budget.Pace]), never refused.
func Budgeted(c classify.Class) bool { return Adaptive(c) || c == classify.ConnectionLost }

// Backoff returns jitter * min(maxBackoff, base * 2^attempt), the Client Backpressure specification's
// formula, for attempt >= 1. jitter is clamped to [0, 1].
func Backoff(jitter float64, base, maxBackoff time.Duration, attempt int) time.Duration {
	if jitter <= 0 || base <= 0 || maxBackoff <= 0 {
		return 0
	}
	if jitter > 1 {
		jitter = 1
	}
	d := maxBackoff
	if attempt < 62 {
		// base * 2^attempt, saturating at maxBackoff without overflow.
		if exp := base << uint(attempt); exp>>uint(attempt) == base && exp > 0 && exp < maxBackoff {
			d = exp
		}
	}
	return time.Duration(jitter * float64(d))
}

// State is the per-call state of the retry loop.
type State struct {
	// Retries counts the retries of the call so far (the Client Backpressure
	// specification's attempt), but those after an unavailable server.
	Retries int
	// OverloadSeen sticks once any attempt failed with an overload error.
	OverloadSeen bool
	// Conflicts counts the conflicts in a row that ended the last attempts.
	Conflicts int
	// Unavailable counts the retries after an unavailable server, and
	// UnavailableSince is when the call's first such error came (zero:
	// none yet).
	Unavailable      int
	UnavailableSince time.Time
}

// Decision is what the loop does after a failed attempt.
type Decision struct {
	Retry   bool
	Backoff time.Duration
	// Stop says why the call ends when Retry is false.
	Stop Stop
}

// Stop says why a call has no further attempt.
type Stop int

// The reasons a call stops.
const (
	NotRetryable Stop = iota // the class is never retried
	CapReached               // MaxRetries or MaxAdaptiveRetries reached, or the class is off
	Deadline                 // the backoff would end past the deadline
	BudgetSpent              // the retry budget is spent
	ContextEnded             // the caller's context ended
	Unreachable              // UnavailableTimeout passed with the server unreachable
)

// Next decides whether a call that failed with an error of class c runs
// again, and after how long. It follows the Client Backpressure specification's pseudocode: the retry
// counter counts every retry; an overload makes MaxAdaptiveRetries the cap of
// the call from then on; a backoff that would end past the deadline ends the
// call at once. An unavailable server is pgtx's own class, outside that
// counter and those caps: nextUnavailable decides its retries.
func (p *Policy) Next(st *State, c classify.Class, now time.Time, deadline time.Time, hasDeadline bool) Decision {
	if !Retryable(c) {
		return Decision{Stop: NotRetryable}
	}
	if c == classify.Unavailable {
		return p.nextUnavailable(st, now, deadline, hasDeadline)
	}
	// A class the caller switched off is never retried, whatever the cap
	// an earlier overload made the call's.
	if (c == classify.Overload && p.MaxAdaptiveRetries == 0) || (c != classify.Overload && p.MaxRetries == 0) {
		return Decision{Stop: CapReached}
	}
	st.Retries++
	if c == classify.Overload {
		st.OverloadSeen = true
	}
	allowed := p.MaxRetries
	if st.OverloadSeen {
		allowed = p.MaxAdaptiveRetries
	}
	if st.Retries > allowed {
		return Decision{Stop: CapReached}
	}
	base, maxB := p.ConflictBaseBackoff, p.ConflictMaxBackoff
	if Adaptive(c) {
		base, maxB = p.BaseBackoff, p.MaxBackoff
	}
	d := Backoff(clampJitter(p.Jitter()), base, maxB, st.Retries)
	if hasDeadline && now.Add(d).After(deadline) {
		return Decision{Stop: Deadline}
	}
	return Decision{Retry: true, Backoff: d}
}

// nextUnavailable decides the retry after an unavailable server: retried
// until the end, the earlier of the deadline and UnavailableTimeout after the
// call's first unavailable error, with the overload backoff cut to half the
// time left; when that half is under BaseBackoff, the pause lasts until the
// end (past a deadline by BaseBackoff, so that the context, not the pause,
// ends the call).
func (p *Policy) nextUnavailable(st *State, now time.Time, deadline time.Time, hasDeadline bool) Decision {
	if p.UnavailableTimeout <= 0 {
		return Decision{Stop: CapReached}
	}
	if st.UnavailableSince.IsZero() {
		st.UnavailableSince = now
	}
	end := st.UnavailableSince.Add(p.UnavailableTimeout)
	atDeadline := hasDeadline && !deadline.After(end)
	if atDeadline {
		end = deadline
	}
	left := end.Sub(now)
	if left <= 0 {
		if atDeadline {
			// The deadline passed by the clock before the context said so.
			return Decision{Stop: ContextEnded}
		}
		return Decision{Stop: Unreachable}
	}
	st.Unavailable++
	d := Backoff(clampJitter(p.Jitter()), p.BaseBackoff, p.MaxBackoff, st.Unavailable)
	if d > left/2 {
		d = left / 2
		if d < p.BaseBackoff {
			d = left
			if atDeadline {
				d += p.BaseBackoff
			}
		}
	}
	return Decision{Retry: true, Backoff: d}
}

func clampJitter(j float64) float64 {
	switch {
	case j != j || j < 0: // NaN or negative
		return 0
	case j >= 1:
		return 1
	}
	return j
}
