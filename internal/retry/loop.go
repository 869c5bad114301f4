package retry

import (
	"context"
	"errors"
	"time"

	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/contention"
	"github.com/pgtx-go/pgtx/internal/errs"
)

// Loop runs the attempts of one call until one succeeds or the policy ends
// the call. Each attempt has released its connection (and rolled back)
// before it returns, so the loop never sleeps holding a connection. A Loop
// is built by value for each call.
type Loop struct {
	// Policy is the call's: the pool's, with the call's overrides.
	Policy Policy
	Clock  Clock
	Budget *Budget          // nil: no budget
	Gate   *contention.Gate // nil: no contention manager
	// Wake, when set, is the pause after an unavailable server instead of
	// Clock's: it ends early when a connection to the server is made.
	Wake   Sleeper
	Tracer Tracer // nil: no events
	// GaveUp makes the error of a call that stopped with err after
	// attempts, unless that error is returned as it is (see Run).
	GaveUp func(err error, attempts int, why Why) error
}

// Run returns nil after a successful attempt, or the last attempt's error,
// as GaveUp's error when the call was retried or a retry was refused. When
// ctx ended the call, the error matches ctx.Err() as well.
func (l *Loop) Run(ctx context.Context, attempt func(ctx context.Context) (classify.Class, error)) error {
	c := l.startCall(ctx)
	var err error
	interrupted := false // the context ended during a backoff
	for {
		a := l.try(&c, attempt)
		var d Decision
		d, err = l.decide(&c, &a)
		if !d.Retry && err != nil {
			err = l.gaveUp(err, a.class, c.n, d.Stop, &c.st)
		}
		l.attemptEnd(&c, &a, d, err)
		if !d.Retry {
			break
		}
		if !l.pause(&c, a.class, d.Backoff) {
			interrupted = true
			err = l.gaveUp(errs.WithContext(ctx, err), a.class, c.n, ContextEnded, &c.st)
			break
		}
	}
	l.end(&c, err, interrupted)
	return err
}

// callState is one run of a Loop: its context, its deadline and its attempts.
type callState struct {
	ctx         context.Context // the caller's
	traced      context.Context // the call's, as the tracer returned it
	start       time.Time       // set only for a tracer or a gate
	deadline    time.Time
	hasDeadline bool
	st          State
	n           int // attempts made
}

// attemptState is one attempt: its context and start for the tracer, its
// admission at the gate, and its outcome.
type attemptState struct {
	ctx      context.Context
	start    time.Time
	adm      contention.Admission
	admitErr error // the wait at the gate failed: the attempt did not run
	class    classify.Class
	err      error
}

// startCall begins the call: its deadline, its start, its trace.
func (l *Loop) startCall(ctx context.Context) callState {
	c := callState{ctx: ctx, traced: ctx}
	c.deadline, c.hasDeadline = ctx.Deadline()
	if l.Tracer != nil || l.Gate != nil {
		c.start = l.Clock.Now()
	}
	if l.Tracer != nil {
		c.traced = l.Tracer.CallStart(ctx)
	}
	return c
}

// try runs one attempt, admitted by the gate when there is one.
func (l *Loop) try(c *callState, attempt func(ctx context.Context) (classify.Class, error)) attemptState {
	c.n++
	a := attemptState{ctx: c.traced}
	if l.Tracer != nil {
		a.start = l.Clock.Now()
		a.ctx = l.Tracer.AttemptStart(c.traced, c.n)
	}
	switch {
	case l.Gate == nil:
		a.class, a.err = attempt(a.ctx)
	case !l.admit(c, &a):
		a.class, a.err = classify.Timeout, a.admitErr
	case a.adm.Held:
		// Only an attempt the gate limited is timed for it: an open gate
		// needs no clock.
		began := l.Clock.Now()
		a.class, a.err = attempt(a.ctx)
		l.Gate.Done(a.ctx, a.adm, outcome(a.class), l.Clock.Now().Sub(began))
	default:
		a.class, a.err = attempt(a.ctx)
		l.Gate.Done(a.ctx, a.adm, outcome(a.class), 0)
	}
	if a.class == classify.Conflict {
		c.st.Conflicts++
	} else {
		c.st.Conflicts = 0
	}
	return a
}

// admit waits at the gate, older calls first, and reports admission.
func (l *Loop) admit(c *callState, a *attemptState) bool {
	a.adm, a.admitErr = l.Gate.Admit(c.ctx, c.start.UnixNano(), c.st.Conflicts)
	return a.admitErr == nil
}

// decide decides whether attempt a runs again and after how long, and
// returns its error as the call sees it.
func (l *Loop) decide(c *callState, a *attemptState) (Decision, error) {
	ctx, err := c.ctx, a.err
	switch {
	case a.admitErr != nil && ctx.Err() == nil:
		// The wait at the gate ended (the acquire timeout, or a deadline
		// no admitted attempt could meet): no retry, as after a backoff
		// that would end past the deadline.
		if c.n > 1 && errors.Is(a.admitErr, contention.ErrAdmissionDeadline) {
			return Decision{Stop: Deadline}, err
		}
		return Decision{Stop: NotRetryable}, err
	case err == nil:
		if l.Budget != nil {
			l.Budget.Success(l.Clock.Now())
		}
		return Decision{}, nil
	case ctx.Err() != nil:
		if endedByContext(a.class) {
			err = errs.WithContext(ctx, err)
		}
		return Decision{Stop: ContextEnded}, err
	}
	d := l.Policy.Next(&c.st, a.class, l.Clock.Now(), c.deadline, c.hasDeadline)
	if d.Stop == ContextEnded {
		// The deadline passed by the clock, not yet by ctx.
		err = pastDeadline(err)
	}
	return l.withBudget(d, a.class), err
}

// withBudget applies the retry budget and the gate to the policy's
// decision d after an attempt of class.
func (l *Loop) withBudget(d Decision, class classify.Class) Decision {
	switch {
	case !d.Retry || l.Budget == nil || !Budgeted(class):
	case class == classify.Unavailable:
		// Retries of a server that cannot be reached do not load it: the
		// budget paces them, and never ends the call.
		d.Backoff = max(d.Backoff, l.Budget.Pace(l.Clock.Now()))
	case !l.Budget.Withdraw(l.Clock.Now()):
		d = Decision{Stop: BudgetSpent}
	}
	if class == classify.Conflict && l.Gate != nil && l.Gate.Limiting() && (d.Retry || d.Stop == Deadline) {
		// The gate orders the retry: it runs when a slot frees, that is
		// when a running attempt of the label ends, and the gate refuses
		// it if it could not finish in time. So no pause, and no refusal
		// for a pause that is not taken.
		d = Decision{Retry: true}
	}
	return d
}

// pause waits d before the next attempt, and reports false when ctx ended
// meanwhile: an attempt on a dead context would only replace the error
// with ctx's.
func (l *Loop) pause(c *callState, class classify.Class, d time.Duration) bool {
	sleep := l.Clock.Sleep
	if class == classify.Unavailable && l.Wake != nil {
		sleep = l.Wake.Sleep
	}
	return sleep(c.ctx, d) == nil && c.ctx.Err() == nil
}

// attemptEnd reports attempt a, its decision d and its error to the tracer.
func (l *Loop) attemptEnd(c *callState, a *attemptState, d Decision, err error) {
	if tr := l.Tracer; tr != nil {
		tr.AttemptEnd(a.ctx, AttemptEnd{Attempt: c.n, Err: err, Class: a.class, Duration: l.Clock.Now().Sub(a.start),
			Retry: d.Retry, Backoff: d.Backoff, Wait: a.adm.Wait, Limit: a.adm.Limit})
	}
}

// end reports the call's end to the tracer.
func (l *Loop) end(c *callState, err error, interrupted bool) {
	if tr := l.Tracer; tr != nil {
		tr.CallEnd(c.traced, CallEnd{Attempts: c.n, Err: err, Interrupted: interrupted, Duration: l.Clock.Now().Sub(c.start)})
	}
}

// endedByContext reports whether the caller's context, having ended, is
// what ended a call whose attempt failed with class c: the loop would have
// retried, or the attempt itself timed out. An ambiguous COMMIT or a
// permanent error that merely raced the cancellation keeps its own class.
func endedByContext(c classify.Class) bool { return Retryable(c) || c == classify.Timeout }

// pastDeadline returns err matching context.DeadlineExceeded, for a call
// whose deadline the clock saw pass before the context reported it.
func pastDeadline(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &errs.ContextError{CtxErr: context.DeadlineExceeded, Err: err}
}

// outcome is how the contention manager counts an attempt of class c.
func outcome(c classify.Class) contention.Outcome {
	switch c {
	case classify.None:
		return contention.Committed
	case classify.Conflict:
		return contention.Conflict
	}
	return contention.Failed
}
