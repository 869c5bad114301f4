package pgtx

import (
	"context"
	"errors"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/contention"
	"github.com/pgtx-go/pgtx/internal/retry"
)

// The defaults of RetryConfig, stated on each field.
const (
	defaultMaxRetries          = 10
	defaultMaxAdaptiveRetries  = 2
	defaultBaseBackoff         = 100 * time.Millisecond
	defaultMaxBackoff          = 10 * time.Second
	defaultConflictBaseBackoff = 5 * time.Millisecond
	defaultConflictMaxBackoff  = 500 * time.Millisecond
	defaultUnavailableTimeout  = 15 * time.Second
)

// RetryConfig says how often and how far apart [Transaction] runs a
// transaction again. The zero value is the default of every field.
type RetryConfig struct {
	// MaxRetries caps the retries of a call after conflicts (40001, 40P01)
	// and connections lost before COMMIT, as long as no overload error has
	// been seen. Default 10; negative: no such retries.
	MaxRetries int

	// MaxAdaptiveRetries caps the retries after an overload error (53300,
	// 57P03, a pooler's admission error). Once one has been seen, it caps
	// every later retry of the call whatever its cause, but those after an
	// unavailable server. Default 2; negative: no overload retries.
	MaxAdaptiveRetries int

	// UnavailableTimeout is how long a call keeps retrying a server it
	// cannot connect to ([ClassUnavailable]), counted from the call's first
	// such error: a failover or a restart takes seconds. These retries count
	// against neither MaxRetries nor MaxAdaptiveRetries; they are paced by
	// the overload backoff, cut to half the time left before the deadline
	// or this bound so that the next attempt starts in time, and the retry
	// budget applies (docs/overload.md). Default 15s; negative: an
	// unavailable server is not retried.
	UnavailableTimeout time.Duration

	// Jitter returns a value in [0, 1) that scales every backoff (full
	// jitter). nil means math/rand/v2. Values outside [0, 1) are clamped.
	// It must be safe for concurrent use.
	Jitter func() float64

	// BaseBackoff and MaxBackoff shape the overload backoff, the Client
	// Backpressure specification's jitter * min(MaxBackoff,
	// BaseBackoff * 2^attempt), attempt counted from 1 over the call's
	// retries. Defaults 100ms and 10s; negative: no pause.
	BaseBackoff time.Duration
	MaxBackoff  time.Duration

	// ConflictBaseBackoff and ConflictMaxBackoff shape the short pause
	// after a conflict or a lost connection, with the same formula: the
	// jitter keeps two colliding transactions from colliding again.
	// Defaults 5ms and 500ms; negative: no pause.
	ConflictBaseBackoff time.Duration
	ConflictMaxBackoff  time.Duration

	// BudgetRatio, BudgetMinPerSecond and BudgetWindow are the pool's
	// retry budget, so that per-call retries cannot add up to a retry storm
	// when a database sheds load or is down: over the last BudgetWindow,
	// overload, unavailable-server and lost-connection retries may not
	// exceed BudgetRatio times the calls that succeeded, plus a floor of
	// BudgetMinPerSecond retries per second. Conflict retries are not
	// budgeted: a conflict means someone else committed. A refused retry
	// ends the call with an error matching [ErrRetryBudgetExhausted].
	//
	// BudgetRatio is the share of recent successful calls that may be
	// retried. Default 0.2; negative: the budget is off.
	BudgetRatio float64
	// BudgetMinPerSecond is the floor: retries allowed per second whatever
	// the successes. Default 10; negative: no floor.
	BudgetMinPerSecond float64
	// BudgetWindow is how far back successes and retries count. Default
	// 10s; negative: no window, only the floor allows retries.
	BudgetWindow time.Duration
}

// validate reports a policy that cannot be applied.
func (p RetryConfig) validate() error {
	if p.BudgetRatio != p.BudgetRatio || p.BudgetMinPerSecond != p.BudgetMinPerSecond {
		return &invalidArgError{Msg: "Retry: BudgetRatio and BudgetMinPerSecond must be numbers"}
	}
	return nil
}

// withDefaults returns p with every zero field set to its default.
func (p RetryConfig) withDefaults() RetryConfig {
	p.MaxRetries = defaultOrNone(p.MaxRetries, defaultMaxRetries)
	p.MaxAdaptiveRetries = defaultOrNone(p.MaxAdaptiveRetries, defaultMaxAdaptiveRetries)
	p.BaseBackoff = defaultOrNone(p.BaseBackoff, defaultBaseBackoff)
	p.MaxBackoff = defaultOrNone(p.MaxBackoff, defaultMaxBackoff)
	p.ConflictBaseBackoff = defaultOrNone(p.ConflictBaseBackoff, defaultConflictBaseBackoff)
	p.ConflictMaxBackoff = defaultOrNone(p.ConflictMaxBackoff, defaultConflictMaxBackoff)
	p.UnavailableTimeout = defaultOrNone(p.UnavailableTimeout, defaultUnavailableTimeout)
	if p.Jitter == nil {
		p.Jitter = rand.Float64
	}
	return p
}

// decider returns the settings of p that decide a retry.
func (p *RetryConfig) decider() retry.Policy {
	return retry.Policy{
		MaxAdaptiveRetries: p.MaxAdaptiveRetries, UnavailableTimeout: p.UnavailableTimeout, Jitter: p.Jitter,
		BaseBackoff: p.BaseBackoff, MaxBackoff: p.MaxBackoff,
		ConflictBaseBackoff: p.ConflictBaseBackoff, ConflictMaxBackoff: p.ConflictMaxBackoff,
	}
}

// stopWords are the values of [RetryError].Reason; a cap reached says
// which setting it is instead.
var stopWords = [...]string{
	retry.NotRetryable: "not retryable",
	retry.CapReached:   "MaxRetries",
	retry.Deadline:     "deadline",
	retry.BudgetSpent:  "budget",
	retry.ContextEnded: "context",
	retry.Unreachable:  "UnavailableTimeout",
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
	policy     *RetryConfig
	clock      clock
	maxRetries int
	budget     *retry.Budget     // nil: no budget
	tracer     TransactionTracer // nil: no events
	label      string
	isolation  Isolation
	gate       *contention.Gate // nil: no contention manager
}

// attemptFunc runs one whole attempt and returns its error and class.
type attemptFunc func(ctx context.Context) (Class, error)

// endedByContext reports whether the caller's context, having ended, is
// what ended a call whose attempt failed with class c: the loop would have
// retried, or the attempt itself timed out. An ambiguous COMMIT or a
// permanent error that merely raced the cancellation keeps its own class.
func endedByContext(c Class) bool { return c.Retryable() || c == ClassTimeout }

// run returns nil after a successful attempt, or the last attempt's error,
// as a *RetryError when the call was retried or a retry was refused. When
// ctx ended the call, the error matches ctx.Err() as well.
func (l *retryLoop) run(ctx context.Context, attempt attemptFunc) error {
	var st retry.State
	deadline, hasDeadline := ctx.Deadline()
	callCtx, callStart := ctx, time.Time{}
	if l.tracer != nil || l.gate != nil {
		callStart = l.clock.Now()
	}
	if l.tracer != nil {
		callCtx = l.tracer.TraceTransactionStart(ctx, TraceTransactionStartData{Label: l.label, Isolation: l.isolation})
	}
	n, err, class := 0, error(nil), classNone
	interrupted := false // the context ended during a backoff
	for {
		n++
		actx, start := callCtx, time.Time{}
		if l.tracer != nil {
			start = l.clock.Now()
			actx = l.tracer.TraceAttemptStart(callCtx, TraceAttemptStartData{Label: l.label, Isolation: l.isolation, Attempt: n})
		}
		var t contention.Admission
		var admitErr error
		if l.gate != nil {
			t, admitErr = l.gate.Admit(ctx, callStart.UnixNano(), st.Conflicts)
		}
		if admitErr != nil {
			class, err = ClassTimeout, admitErr
		} else if t.Held {
			// Only an attempt the gate limited is timed for it: an open
			// gate needs no clock.
			began := l.clock.Now()
			class, err = attempt(actx)
			l.gate.Done(actx, t, contentionOutcome(class), l.clock.Now().Sub(began))
		} else if l.gate != nil {
			class, err = attempt(actx)
			l.gate.Done(actx, t, contentionOutcome(class), 0)
		} else {
			class, err = attempt(actx)
		}
		if class == ClassConflict {
			st.Conflicts++
		} else {
			st.Conflicts = 0
		}
		var d retry.Decision
		switch {
		case admitErr != nil && ctx.Err() == nil:
			// The wait at the gate ended (the acquire timeout, or a deadline
			// no admitted attempt could meet): no retry, as after a backoff
			// that would end past the deadline.
			d.Stop = retry.NotRetryable
			if n > 1 && errors.Is(admitErr, contention.ErrAdmissionDeadline) {
				d.Stop = retry.Deadline
			}
		case err == nil:
			if l.budget != nil {
				l.budget.Success(l.clock.Now())
			}
		case ctx.Err() != nil:
			d.Stop = retry.ContextEnded
			if endedByContext(class) {
				err = withContextErr(ctx, err)
			}
		default:
			policy := l.policy.decider()
			d = policy.Next(&st, classify.Class(class), l.maxRetries, l.clock.Now(), deadline, hasDeadline)
			if d.Stop == retry.ContextEnded {
				// The deadline passed by the clock, not yet by ctx.
				err = pastDeadline(err)
			}
			if d.Retry && l.budget != nil && retry.Budgeted(classify.Class(class)) && !l.budget.Withdraw(l.clock.Now()) {
				d = retry.Decision{Stop: retry.BudgetSpent}
			}
			if class == ClassConflict && l.gate != nil && l.gate.Limiting() && (d.Retry || d.Stop == retry.Deadline) {
				// The gate orders the retry: it runs when a slot frees,
				// that is when a running attempt of the label ends, and
				// the gate refuses it if it could not finish in time. So
				// no pause, and no refusal for a pause that is not taken.
				d = retry.Decision{Retry: true}
			}
		}
		if !d.Retry && err != nil {
			err = l.gaveUp(err, class, n, d.Stop, &st)
		}
		if l.tracer != nil {
			l.tracer.TraceAttemptEnd(actx, TraceAttemptEndData{
				Label: l.label, Isolation: l.isolation, Attempt: n,
				Err: err, Class: class, Duration: l.clock.Now().Sub(start),
				Retry: d.Retry, Backoff: d.Backoff, AdmissionWait: t.Wait, Limit: t.Limit,
			})
		}
		if !d.Retry {
			break
		}
		// A pause that ended as ctx did ends the call too: an attempt
		// on a dead context would only replace the error with ctx's.
		if l.clock.Sleep(ctx, d.Backoff) != nil || ctx.Err() != nil {
			interrupted = true
			err = l.gaveUp(withContextErr(ctx, err), class, n, retry.ContextEnded, &st)
			break
		}
	}
	if l.tracer != nil {
		endClass := Classify(err)
		if interrupted {
			endClass = ClassTimeout
		}
		l.tracer.TraceTransactionEnd(callCtx, TraceTransactionEndData{
			Label: l.label, Isolation: l.isolation, Attempts: n,
			Err: err, Class: endClass, Duration: l.clock.Now().Sub(callStart),
		})
	}
	return err
}

// gaveUp returns the error a call that made n attempts ends with: err as it
// is after a single attempt that nothing would have retried, or that its
// context ended, else a *RetryError that says how many attempts there were
// and why no more. A call that ended on an unreachable server always gets
// a *RetryError, so that its message says so first, whichever way it
// ended. class is the last attempt's.
func (l *retryLoop) gaveUp(err error, class Class, n int, why retry.Stop, st *retry.State) error {
	unreachable := endsUnreachable(class, err)
	if n == 1 && (why == retry.NotRetryable || why == retry.ContextEnded) && !unreachable {
		return err
	}
	e := &RetryError{Attempts: n, Err: err, reason: why, unreachable: unreachable}
	switch {
	case why == retry.CapReached && class == ClassUnavailable:
		e.limit = "UnavailableTimeout" // switched off: nothing else caps it
	case why == retry.CapReached && (st.OverloadSeen || (class == ClassOverload && l.policy.MaxAdaptiveRetries == 0)):
		e.limit, e.cap = "MaxAdaptiveRetries", l.policy.MaxAdaptiveRetries
	case why == retry.CapReached:
		e.limit, e.cap = "MaxRetries", l.maxRetries
	}
	if why == retry.Unreachable {
		e.bound = l.policy.UnavailableTimeout
	}
	e.Reason = stopWords[why]
	if e.limit != "" {
		e.Reason = e.limit
	}
	if class == ClassUnavailable && !st.UnavailableSince.IsZero() {
		e.unreachableFor = l.clock.Now().Sub(st.UnavailableSince)
	}
	return e
}

// endsUnreachable reports a last attempt that could not connect to the
// server: unavailable, or an overload from a connect to several hosts of
// which one refused the connection (the others answering 57P03 while they
// shut down or start, say). The caller's first question then is why the
// server cannot be reached, not which cap was reached.
func endsUnreachable(class Class, err error) bool {
	return class == ClassUnavailable || (class == ClassOverload && errors.Is(err, syscall.ECONNREFUSED))
}

// pastDeadline returns err matching context.DeadlineExceeded, for a call
// whose deadline the clock saw pass before the context reported it.
func pastDeadline(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &contextError{CtxErr: context.DeadlineExceeded, Err: err}
}
