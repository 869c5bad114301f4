package pgtx

import (
	"context"
	"math/rand/v2"
	"time"
)

// Defaults of RetryPolicy; a zero field means the default.
const (
	DefaultMaxRetries          = 10
	DefaultMaxAdaptiveRetries  = 2
	DefaultBaseBackoff         = 100 * time.Millisecond
	DefaultMaxBackoff          = 10 * time.Second
	DefaultConflictBaseBackoff = 5 * time.Millisecond
	DefaultConflictMaxBackoff  = 500 * time.Millisecond
)

// RetryPolicy says how often and how far apart Transaction runs a transaction
// again. The zero value is the documented default of every field.
type RetryPolicy struct {
	// MaxRetries caps the retries of a call after conflicts (40001, 40P01)
	// and connections lost before COMMIT, as long as no overload error has
	// been seen. 0 means DefaultMaxRetries (10); negative means none.
	MaxRetries int

	// MaxAdaptiveRetries caps the retries after an overload error (53300,
	// 57P03, a pooler's admission error). Once an overload error has been
	// seen, it caps every later retry of the call whatever its cause: the
	// call's total retry limit becomes MaxAdaptiveRetries. 0 means
	// DefaultMaxAdaptiveRetries (2); negative means no overload retries.
	MaxAdaptiveRetries int

	// Jitter returns a value in [0, 1) that scales every backoff (full
	// jitter). nil means math/rand/v2. Values outside [0, 1) are clamped. It
	// must be safe for concurrent use.
	Jitter func() float64

	// BaseBackoff and MaxBackoff shape the overload backoff:
	// jitter * min(MaxBackoff, BaseBackoff * 2^attempt), attempt counted from
	// 1 over all retries of the call. 0 means DefaultBaseBackoff (100ms) and
	// DefaultMaxBackoff (10s).
	BaseBackoff time.Duration
	MaxBackoff  time.Duration

	// ConflictBaseBackoff and ConflictMaxBackoff shape the short pause after a
	// conflict or a lost connection, with the same formula. Conflicts clear
	// in milliseconds; the jitter keeps two colliding transactions from
	// colliding again, and the cap lets ten retries outlast a hot row
	// (bench/RESULTS.md: with a 100ms cap, calls gave up at 32 workers). 0
	// means DefaultConflictBaseBackoff (5ms) and DefaultConflictMaxBackoff
	// (500ms).
	ConflictBaseBackoff time.Duration
	ConflictMaxBackoff  time.Duration

	// Budget bounds the overload and lost-connection retries of the whole
	// pool; its zero value is on, with the defaults of RetryBudget.
	Budget RetryBudget
}

// validate reports a policy that cannot be applied.
func (p RetryPolicy) validate() error {
	if p.BaseBackoff < 0 || p.MaxBackoff < 0 || p.ConflictBaseBackoff < 0 || p.ConflictMaxBackoff < 0 {
		return &invalidArgError{msg: "RetryPolicy backoff durations must not be negative"}
	}
	return p.Budget.validate()
}

// withDefaults returns p with every zero field set to its default.
func (p RetryPolicy) withDefaults() RetryPolicy {
	p.MaxRetries = defaultOrNone(p.MaxRetries, DefaultMaxRetries)
	p.MaxAdaptiveRetries = defaultOrNone(p.MaxAdaptiveRetries, DefaultMaxAdaptiveRetries)
	p.BaseBackoff = durDefault(p.BaseBackoff, DefaultBaseBackoff)
	p.MaxBackoff = durDefault(p.MaxBackoff, DefaultMaxBackoff)
	p.ConflictBaseBackoff = durDefault(p.ConflictBaseBackoff, DefaultConflictBaseBackoff)
	p.ConflictMaxBackoff = durDefault(p.ConflictMaxBackoff, DefaultConflictMaxBackoff)
	if p.Jitter == nil {
		p.Jitter = rand.Float64
	}
	return p
}

// defaultOrNone maps 0 to def and a negative value to 0 (none): the rule of
// every count, ratio and rate of a config.
func defaultOrNone[T int | float64](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

func durDefault(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// backoff returns jitter * min(maxBackoff, base * 2^attempt), the spec's
// formula, for attempt >= 1. jitter is clamped to [0, 1].
func backoff(jitter float64, base, maxBackoff time.Duration, attempt int) time.Duration {
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

// retryState is the per-call state of the retry loop.
type retryState struct {
	// retries counts all retries of the call so far (the spec's attempt).
	retries int
	// overloadSeen sticks once any attempt failed with an overload error.
	overloadSeen bool
}

// decision is what the loop does after a failed attempt.
type decision struct {
	retry   bool
	backoff time.Duration
	// reason says why the call ends when retry is false.
	reason stopReason
}

type stopReason int

const (
	stopNotRetryable stopReason = iota // the class is never retried
	stopCapReached                     // MaxRetries or MaxAdaptiveRetries reached
	stopDeadline                       // the backoff would end past the deadline
	stopBudget                         // the retry budget is spent
)

// next decides whether a call that failed with an error of class c runs
// again, and after how long. maxRetries is the conflict/lost-connection cap
// for this call (the policy's or the per-call override, already resolved).
// It follows the spec's pseudocode: the retry counter counts every retry; an
// overload makes MaxAdaptiveRetries the cap of the call from then on; a
// backoff that would end past the deadline ends the call at once.
func (p *RetryPolicy) next(st *retryState, c Class, maxRetries int, now time.Time, deadline time.Time, hasDeadline bool) decision {
	if !c.Retryable() {
		return decision{reason: stopNotRetryable}
	}
	// A class the caller switched off is never retried, whatever the cap
	// an earlier overload made the call's.
	if (c.adaptive() && p.MaxAdaptiveRetries == 0) || (!c.adaptive() && maxRetries == 0) {
		return decision{reason: stopCapReached}
	}
	st.retries++
	if c.adaptive() {
		st.overloadSeen = true
	}
	allowed := maxRetries
	if st.overloadSeen {
		allowed = p.MaxAdaptiveRetries
	}
	if st.retries > allowed {
		return decision{reason: stopCapReached}
	}
	base, maxB := p.ConflictBaseBackoff, p.ConflictMaxBackoff
	if c.adaptive() {
		base, maxB = p.BaseBackoff, p.MaxBackoff
	}
	d := backoff(clampJitter(p.Jitter()), base, maxB, st.retries)
	if hasDeadline && now.Add(d).After(deadline) {
		return decision{reason: stopDeadline}
	}
	return decision{retry: true, backoff: d}
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

// clock is the time seam of the retry loop: the real clock in production, a
// fake in unit tests.
type clock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends, and returns ctx.Err() in that case.
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryLoop runs attempts of one call until one succeeds or the policy ends
// the call. Each attempt has released its connection (and rolled back) before
// it returns, so the loop never sleeps holding a connection.
type retryLoop struct {
	policy     *RetryPolicy
	clock      clock
	maxRetries int
	budget     *retryBudget // nil: no budget
	tracer     Tracer       // nil: no events
	label      string
	isolation  Isolation
}

// attemptFunc runs one whole attempt and returns its error and class.
type attemptFunc func(ctx context.Context) (Class, error)

// budgeted reports whether retries of class c draw on the retry budget.
func budgeted(c Class) bool { return c.adaptive() || c == ClassConnectionLost }

// endedByContext reports whether the caller's context, having ended, is
// what ended a call whose attempt failed with class c: the loop would have
// retried, or the attempt itself timed out. An ambiguous COMMIT or a
// permanent error that merely raced the cancellation keeps its own class.
func endedByContext(c Class) bool { return c.Retryable() || c == ClassTimeout }

// run returns nil after a successful attempt, or the last attempt's error.
// When ctx ended the call, the error matches ctx.Err() as well.
func (l *retryLoop) run(ctx context.Context, attempt attemptFunc) error {
	var st retryState
	deadline, hasDeadline := ctx.Deadline()
	callCtx, callStart := ctx, time.Time{}
	txTracer, _ := l.tracer.(TransactionTracer)
	if l.tracer != nil {
		callStart = l.clock.Now()
		if txTracer != nil {
			callCtx = txTracer.TraceTransactionStart(ctx, TraceTransactionStartData{Label: l.label, Isolation: l.isolation})
		}
	}
	for n := 1; ; n++ {
		actx, start := callCtx, time.Time{}
		if l.tracer != nil {
			start = l.clock.Now()
			actx = l.tracer.TraceAttemptStart(callCtx, TraceAttemptStartData{Label: l.label, Isolation: l.isolation, Attempt: n})
		}
		class, err := attempt(actx)
		var d decision
		switch {
		case err == nil:
			if l.budget != nil {
				l.budget.success(l.clock.Now())
			}
		case ctx.Err() != nil:
			if endedByContext(class) {
				err = withContextErr(ctx, err)
			}
		default:
			d = l.policy.next(&st, class, l.maxRetries, l.clock.Now(), deadline, hasDeadline)
			if d.retry && l.budget != nil && budgeted(class) && !l.budget.withdraw(l.clock.Now()) {
				d = decision{reason: stopBudget}
				err = &budgetExhaustedError{err: err}
				if bt, ok := l.tracer.(RetryBudgetTracer); ok {
					bt.TraceRetryBudgetExhausted(actx, TraceRetryBudgetData{Label: l.label, Attempt: n, Err: err, Class: class})
				}
			}
		}
		if l.tracer != nil {
			now := l.clock.Now()
			l.tracer.TraceAttemptEnd(actx, TraceAttemptEndData{
				Label: l.label, Isolation: l.isolation, Attempt: n,
				Err: err, Class: class, Duration: now.Sub(start),
				Retry: d.retry, Backoff: d.backoff,
			})
			if !d.retry && txTracer != nil {
				txTracer.TraceTransactionEnd(callCtx, TraceTransactionEndData{
					Label: l.label, Isolation: l.isolation, Attempts: n,
					Err: err, Class: Classify(err), Duration: now.Sub(callStart),
				})
			}
		}
		if !d.retry {
			return err
		}
		if l.clock.Sleep(ctx, d.backoff) != nil {
			err = withContextErr(ctx, err)
			if txTracer != nil {
				txTracer.TraceTransactionEnd(callCtx, TraceTransactionEndData{
					Label: l.label, Isolation: l.isolation, Attempts: n,
					Err: err, Class: ClassTimeout, Duration: l.clock.Now().Sub(callStart),
				})
			}
			return err
		}
	}
}
