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
// ctx ended the call, the error matches ctx.Err() as well. It drives a
// [Call] as a caller that runs its own attempts does.
func (l *Loop) Run(ctx context.Context, attempt func(ctx context.Context) (classify.Class, error)) error {
	c := l.Start(ctx)
	for {
		actx, admitted := c.Begin()
		var class classify.Class
		var err error
		if admitted {
			class, err = attempt(actx)
		}
		if !c.End(class, err) {
			return c.Err()
		}
	}
}

// Call is one run of a Loop, driven by its caller, so that control goes
// down from the caller into the loop: [Call.Begin] before each attempt,
// [Call.End] after it, until End returns false; then [Call.Err]. A Call is
// used by one goroutine.
type Call struct {
	l           Loop            // a copy: the caller's may change once the call started
	ctx         context.Context // the caller's
	traced      context.Context // the call's, as the tracer returned it
	start       time.Time       // set only for a tracer or a gate
	deadline    time.Time
	hasDeadline bool
	st          State
	n           int          // attempts made
	a           attemptState // the current attempt
	err         error        // the call's, once End returned false
}

// attemptState is one attempt: its context and start for the tracer, its
// admission at the gate, and its outcome.
type attemptState struct {
	ctx      context.Context
	start    time.Time
	began    time.Time // after admission, for a gate that limited it
	adm      contention.Admission
	admitErr error // the wait at the gate failed: the attempt did not run
	class    classify.Class
	err      error
}

// Start begins a call: its deadline, its start, its trace.
func (l *Loop) Start(ctx context.Context) Call {
	c := Call{l: *l, ctx: ctx, traced: ctx}
	c.deadline, c.hasDeadline = ctx.Deadline()
	if l.Tracer != nil || l.Gate != nil {
		c.start = l.Clock.Now()
	}
	if l.Tracer != nil {
		c.traced = l.Tracer.CallStart(ctx)
	}
	return c
}

// Begin starts an attempt and returns its context; false when the gate
// refused it, which then does not run. End follows either way.
func (c *Call) Begin() (context.Context, bool) {
	l := &c.l
	c.n++
	c.a = attemptState{ctx: c.traced}
	if l.Tracer != nil {
		c.a.start = l.Clock.Now()
		c.a.ctx = l.Tracer.AttemptStart(c.traced, c.n)
	}
	if l.Gate != nil {
		if !l.admit(c, &c.a) {
			return c.a.ctx, false
		}
		if c.a.adm.Held {
			// Only an attempt the gate limited is timed for it: an open
			// gate needs no clock.
			c.a.began = l.Clock.Now()
		}
	}
	return c.a.ctx, true
}

// End ends the attempt Begin started, which failed with err of class
// (ignored when the gate refused it), and reports whether another follows:
// the pause before it is over. When it returns false the call is over.
func (c *Call) End(class classify.Class, err error) bool {
	l, a := &c.l, &c.a
	switch {
	case a.admitErr != nil:
		class, err = classify.Timeout, a.admitErr
	case l.Gate != nil && a.adm.Held:
		l.Gate.Done(a.ctx, a.adm, outcome(class), l.Clock.Now().Sub(a.began))
	case l.Gate != nil:
		l.Gate.Done(a.ctx, a.adm, outcome(class), 0)
	}
	a.class, a.err = class, err
	if class == classify.Conflict {
		c.st.Conflicts++
	} else {
		c.st.Conflicts = 0
	}
	d, err := l.decide(c, a)
	if !d.Retry && err != nil {
		err = l.gaveUp(err, a.class, c.n, d.Stop, &c.st)
	}
	l.attemptEnd(c, a, d, err)
	switch {
	case !d.Retry:
		l.end(c, err, false)
	case !l.pause(c, a.class, d.Backoff):
		// The context ended during the pause.
		err = l.gaveUp(errs.WithContext(c.ctx, err), a.class, c.n, ContextEnded, &c.st)
		l.end(c, err, true)
	default:
		return true
	}
	c.err = err
	return false
}

// Err returns the call's error once End returned false: nil after a
// successful attempt.
func (c *Call) Err() error { return c.err }

// admit waits at the gate, older calls first, and reports admission.
func (l *Loop) admit(c *Call, a *attemptState) bool {
	a.adm, a.admitErr = l.Gate.Admit(c.ctx, c.start.UnixNano(), c.st.Conflicts)
	return a.admitErr == nil
}

// decide decides whether attempt a runs again and after how long, and
// returns its error as the call sees it.
func (l *Loop) decide(c *Call, a *attemptState) (Decision, error) {
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
func (l *Loop) pause(c *Call, class classify.Class, d time.Duration) bool {
	sleep := l.Clock.Sleep
	if class == classify.Unavailable && l.Wake != nil {
		sleep = l.Wake.Sleep
	}
	return sleep(c.ctx, d) == nil && c.ctx.Err() == nil
}

// attemptEnd reports attempt a, its decision d and its error to the tracer.
func (l *Loop) attemptEnd(c *Call, a *attemptState, d Decision, err error) {
	if tr := l.Tracer; tr != nil {
		tr.AttemptEnd(a.ctx, AttemptEnd{Attempt: c.n, Err: err, Class: a.class, Duration: l.Clock.Now().Sub(a.start),
			Retry: d.Retry, Backoff: d.Backoff, Wait: a.adm.Wait, Limit: a.adm.Limit})
	}
}

// end reports the call's end to the tracer.
func (l *Loop) end(c *Call, err error, interrupted bool) {
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
