package retry

import (
	"context"
	"errors"
	"strconv"
	"syscall"
	"time"

	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/contention"
	"github.com/pgtx-go/pgtx/internal/errs"
)

// Clock is the time of a call's retry loop: the real clock in production,
// a fake in unit tests, whose Sleep returns at once.
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends, and returns ctx.Err() in that case.
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the clock of production: the time of day, and a timer for
// each pause.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// Sleep waits d or until ctx ends, and returns ctx.Err() in that case.
func (RealClock) Sleep(ctx context.Context, d time.Duration) error {
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

// Sleeper is a pause that may end early: Sleep waits d or until ctx ends
// (then it returns ctx.Err()).
type Sleeper interface {
	Sleep(ctx context.Context, d time.Duration) error
}

// Tracer receives the events of one call, in this order: CallStart, then
// AttemptStart and AttemptEnd for each attempt, then CallEnd. CallStart's
// context is the parent of every AttemptStart's, and each AttemptStart's
// is the attempt's own, which its AttemptEnd receives, so that the root's
// tracer nests its spans as its events promise.
type Tracer interface {
	CallStart(ctx context.Context) context.Context
	AttemptStart(ctx context.Context, attempt int) context.Context
	AttemptEnd(ctx context.Context, e AttemptEnd)
	CallEnd(ctx context.Context, e CallEnd)
}

// AttemptEnd describes a finished attempt and the decision that followed
// it.
type AttemptEnd struct {
	// Attempt counts the call's attempts from 1.
	Attempt int
	// Err is the attempt's error, nil when it committed; when no retry
	// follows, the error the call returns.
	Err   error
	Class classify.Class
	// Duration is the attempt's time, its wait at the gate included.
	Duration time.Duration
	// Retry and Backoff are the decision: another attempt after Backoff.
	Retry   bool
	Backoff time.Duration
	// Wait is how long the attempt waited at the gate, and Limit the
	// label's limit it was admitted under (0: the gate was open).
	Wait  time.Duration
	Limit int
}

// CallEnd describes a finished call.
type CallEnd struct {
	Attempts int
	// Err is the call's error, nil when it committed.
	Err error
	// Interrupted reports that the context ended during a backoff: the
	// call ended as a timeout, whatever the last attempt's error.
	Interrupted bool
	// Duration is the call's time, backoffs included.
	Duration time.Duration
}

// Why says why a call made no further attempt, for the error that says so
// (pgtx's RetryError, whose fields these are).
type Why struct {
	Stop Stop
	// Reason is Stop's word ("deadline", "budget"...), or the name of the
	// setting whose cap was reached.
	Reason string
	// Limit is the setting whose cap was reached or is off, and Cap its
	// value (0: off); empty unless Stop is CapReached.
	Limit string
	Cap   int
	// Unreachable says the call ended on a server it could not connect to;
	// UnreachableFor is for how long, from the call's first unavailable
	// error (0: the call ended at that first error); Bound is the
	// UnavailableTimeout that ended the call, when it did.
	Unreachable    bool
	UnreachableFor time.Duration
	Bound          time.Duration
}

// stopWords are the values of Why.Reason when no cap was reached.
var stopWords = [...]string{
	NotRetryable: "not retryable",
	CapReached:   "MaxRetries",
	Deadline:     "deadline",
	BudgetSpent:  "budget",
	ContextEnded: "context",
	Unreachable:  "UnavailableTimeout",
}

// Loop runs the attempts of one call until one succeeds or the policy ends
// the call. Each attempt has released its connection (and rolled back)
// before it returns, so the loop never sleeps holding a connection. A Loop
// is built by value for each call, so that running it allocates nothing.
type Loop struct {
	Policy Policy
	// MaxRetries is the call's cap on conflict and lost-connection
	// retries, resolved (0: off).
	MaxRetries int
	Clock      Clock
	Budget     *Budget          // nil: no budget
	Gate       *contention.Gate // nil: no contention manager
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
	var st State
	deadline, hasDeadline := ctx.Deadline()
	callCtx, callStart := ctx, time.Time{}
	if l.Tracer != nil || l.Gate != nil {
		callStart = l.Clock.Now()
	}
	if l.Tracer != nil {
		callCtx = l.Tracer.CallStart(ctx)
	}
	n, err, class := 0, error(nil), classify.None
	interrupted := false // the context ended during a backoff
	for {
		n++
		actx, start := callCtx, time.Time{}
		if l.Tracer != nil {
			start = l.Clock.Now()
			actx = l.Tracer.AttemptStart(callCtx, n)
		}
		var t contention.Admission
		var admitErr error
		if l.Gate != nil {
			t, admitErr = l.Gate.Admit(ctx, callStart.UnixNano(), st.Conflicts)
		}
		if admitErr != nil {
			class, err = classify.Timeout, admitErr
		} else if t.Held {
			// Only an attempt the gate limited is timed for it: an open
			// gate needs no clock.
			began := l.Clock.Now()
			class, err = attempt(actx)
			l.Gate.Done(actx, t, outcome(class), l.Clock.Now().Sub(began))
		} else if l.Gate != nil {
			class, err = attempt(actx)
			l.Gate.Done(actx, t, outcome(class), 0)
		} else {
			class, err = attempt(actx)
		}
		if class == classify.Conflict {
			st.Conflicts++
		} else {
			st.Conflicts = 0
		}
		var d Decision
		switch {
		case admitErr != nil && ctx.Err() == nil:
			// The wait at the gate ended (the acquire timeout, or a deadline
			// no admitted attempt could meet): no retry, as after a backoff
			// that would end past the deadline.
			d.Stop = NotRetryable
			if n > 1 && errors.Is(admitErr, contention.ErrAdmissionDeadline) {
				d.Stop = Deadline
			}
		case err == nil:
			if l.Budget != nil {
				l.Budget.Success(l.Clock.Now())
			}
		case ctx.Err() != nil:
			d.Stop = ContextEnded
			if endedByContext(class) {
				err = errs.WithContext(ctx, err)
			}
		default:
			d = l.Policy.Next(&st, class, l.MaxRetries, l.Clock.Now(), deadline, hasDeadline)
			if d.Stop == ContextEnded {
				// The deadline passed by the clock, not yet by ctx.
				err = pastDeadline(err)
			}
			switch {
			case !d.Retry || l.Budget == nil || !Budgeted(class):
			case class == classify.Unavailable:
				// Retries of a server that cannot be reached do not load it:
				// the budget paces them, and never ends the call.
				d.Backoff = max(d.Backoff, l.Budget.Pace(l.Clock.Now()))
			case !l.Budget.Withdraw(l.Clock.Now()):
				d = Decision{Stop: BudgetSpent}
			}
			if class == classify.Conflict && l.Gate != nil && l.Gate.Limiting() && (d.Retry || d.Stop == Deadline) {
				// The gate orders the retry: it runs when a slot frees,
				// that is when a running attempt of the label ends, and
				// the gate refuses it if it could not finish in time. So
				// no pause, and no refusal for a pause that is not taken.
				d = Decision{Retry: true}
			}
		}
		if !d.Retry && err != nil {
			err = l.gaveUp(err, class, n, d.Stop, &st)
		}
		if l.Tracer != nil {
			l.Tracer.AttemptEnd(actx, AttemptEnd{Attempt: n, Err: err, Class: class, Duration: l.Clock.Now().Sub(start),
				Retry: d.Retry, Backoff: d.Backoff, Wait: t.Wait, Limit: t.Limit})
		}
		if !d.Retry {
			break
		}
		// A pause that ended as ctx did ends the call too: an attempt
		// on a dead context would only replace the error with ctx's.
		sleep := l.Clock.Sleep
		if class == classify.Unavailable && l.Wake != nil {
			sleep = l.Wake.Sleep
		}
		if sleep(ctx, d.Backoff) != nil || ctx.Err() != nil {
			interrupted = true
			err = l.gaveUp(errs.WithContext(ctx, err), class, n, ContextEnded, &st)
			break
		}
	}
	if l.Tracer != nil {
		l.Tracer.CallEnd(callCtx, CallEnd{Attempts: n, Err: err, Interrupted: interrupted, Duration: l.Clock.Now().Sub(callStart)})
	}
	return err
}

// gaveUp returns the error a call that made n attempts ends with: err as it
// is after a single attempt that nothing would have retried, or that its
// context ended, else GaveUp's, told how many attempts there were and why
// no more. A call that ended on an unreachable server always gets GaveUp's
// error, so that its message says so first, whichever way it ended. class
// is the last attempt's.
func (l *Loop) gaveUp(err error, class classify.Class, n int, stop Stop, st *State) error {
	why := Why{Stop: stop, Reason: stopWords[stop], Unreachable: endsUnreachable(class, err)}
	if n == 1 && (stop == NotRetryable || stop == ContextEnded) && !why.Unreachable {
		return err
	}
	switch {
	case stop == CapReached && class == classify.Unavailable:
		why.Limit = "UnavailableTimeout" // switched off: nothing else caps it
	case stop == CapReached && (st.OverloadSeen || (class == classify.Overload && l.Policy.MaxAdaptiveRetries == 0)):
		why.Limit, why.Cap = "MaxAdaptiveRetries", l.Policy.MaxAdaptiveRetries
	case stop == CapReached:
		why.Limit, why.Cap = "MaxRetries", l.MaxRetries
	}
	if why.Limit != "" {
		why.Reason = why.Limit
	}
	if stop == Unreachable {
		why.Bound = l.Policy.UnavailableTimeout
	}
	if class == classify.Unavailable && !st.UnavailableSince.IsZero() {
		why.UnreachableFor = l.Clock.Now().Sub(st.UnavailableSince)
	}
	return l.GaveUp(err, n, why)
}

// endedByContext reports whether the caller's context, having ended, is
// what ended a call whose attempt failed with class c: the loop would have
// retried, or the attempt itself timed out. An ambiguous COMMIT or a
// permanent error that merely raced the cancellation keeps its own class.
func endedByContext(c classify.Class) bool { return Retryable(c) || c == classify.Timeout }

// endsUnreachable reports a last attempt that could not connect to the
// server: unavailable, or an overload from a connect to several hosts of
// which one refused the connection (the others answering 57P03 while they
// shut down or start, say). The caller's first question then is why the
// server cannot be reached, not which cap was reached.
func endsUnreachable(c classify.Class, err error) bool {
	return c == classify.Unavailable || (c == classify.Overload && errors.Is(err, syscall.ECONNREFUSED))
}

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

// Message is the text of the error of a call that stopped for w after
// attempts, with err its last attempt's error and class err's class
// name: what happened when the server was unreachable, then how many
// attempts there were, why they stopped, and the last error.
func (w Why) Message(attempts int, err error, class func(error) string) string {
	verb, why := "gave up", ""
	switch w.Stop {
	case NotRetryable:
		verb, why = "failed", "not retryable: "+class(err)
	case CapReached:
		why = w.Limit + " " + strconv.Itoa(w.Cap)
		if w.Cap == 0 {
			why = w.Limit + " off" // switched off with a negative value
		}
	case Deadline:
		why = "the next retry would end past the context's deadline"
	case BudgetSpent:
		why = "retry budget exhausted"
	case ContextEnded:
		why = "the context ended"
	case Unreachable:
		why = "UnavailableTimeout " + w.Bound.String()
	}
	lead := "pgtx: "
	if w.Unreachable {
		lead = "pgtx: the server is unreachable: "
	}
	noun := " attempts"
	if attempts == 1 {
		noun = " attempt"
	}
	in := ""
	if d := w.UnreachableFor; d >= time.Second {
		in = " in " + d.Round(10*time.Millisecond).String()
	} else if d > 0 {
		in = " in " + d.Round(time.Millisecond).String()
	}
	return lead + verb + " after " + strconv.Itoa(attempts) + noun + in + " (" + why + "): " + err.Error()
}
