package retry

import (
	"errors"
	"strconv"
	"syscall"
	"time"

	"github.com/pgtx-go/pgtx/internal/classify"
)

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
		why.Limit, why.Cap = "MaxRetries", l.Policy.MaxRetries
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

// endsUnreachable reports a last attempt that could not connect to the
// server: unavailable, or an overload from a connect to several hosts of
// which one refused the connection (the others answering 57P03 while they
// shut down or start, say). The caller's first question then is why the
// server cannot be reached, not which cap was reached.
func endsUnreachable(c classify.Class, err error) bool {
	return c == classify.Unavailable || (c == classify.Overload && errors.Is(err, syscall.ECONNREFUSED))
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
