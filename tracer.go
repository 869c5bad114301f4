package pgtx

import (
	"context"
	"time"
)

// Tracer receives an event at the start and at the end of every attempt of
// a Transaction call, in the style of pgx's tracers. Every start has exactly
// one end. A nil Config.Tracer costs nothing. Implementations must be safe
// for concurrent use and should return quickly: they run on the call's path.
type Tracer interface {
	// TraceAttemptStart is called before an attempt acquires its
	// connection. The context it returns is the attempt's context: fn
	// receives it, and TraceAttemptEnd gets it, so a span started here nests
	// the attempt's work.
	TraceAttemptStart(ctx context.Context, data TraceAttemptStartData) context.Context

	// TraceAttemptEnd is called after the attempt has released its
	// connection and the retry decision is made, before any backoff.
	TraceAttemptEnd(ctx context.Context, data TraceAttemptEndData)
}

// TraceAttemptStartData describes an attempt about to start.
type TraceAttemptStartData struct {
	// Label is TxOptions.Label.
	Label string
	// Isolation is the call's isolation level.
	Isolation Isolation
	// Attempt counts the call's attempts from 1.
	Attempt int
}

// TraceAttemptEndData describes a finished attempt.
type TraceAttemptEndData struct {
	Label     string
	Isolation Isolation
	Attempt   int
	// Err is the attempt's error; nil when it committed.
	Err error
	// Class is the class of Err (ClassNone when it committed).
	Class Class
	// Duration is the attempt's wall time, acquire to release.
	Duration time.Duration
	// Retry reports whether another attempt follows, after Backoff.
	Retry   bool
	Backoff time.Duration
}

// TransactionTracer is an optional interface of a Config.Tracer: it also
// receives one event at the start and one at the end of every Transaction
// call. The context TraceTransactionStart returns is the parent of every
// attempt's context, so a span started there spans all attempts.
type TransactionTracer interface {
	TraceTransactionStart(ctx context.Context, data TraceTransactionStartData) context.Context
	TraceTransactionEnd(ctx context.Context, data TraceTransactionEndData)
}

// TraceTransactionStartData describes a call about to start.
type TraceTransactionStartData struct {
	Label     string
	Isolation Isolation
}

// TraceTransactionEndData describes a finished call.
type TraceTransactionEndData struct {
	Label     string
	Isolation Isolation
	// Attempts is how many attempts the call made.
	Attempts int
	// Err is the call's error (nil when it committed) and Class its class.
	Err   error
	Class Class
	// Duration is the call's wall time, backoffs included.
	Duration time.Duration
}

// CancelTracer is an optional interface of a Config.Tracer: it receives an
// event for every statement cancelled because its context ended, once the
// cancel has finished.
type CancelTracer interface {
	TraceCancel(ctx context.Context, data TraceCancelData)
}

// CancelOutcome is how a cancellation ended.
type CancelOutcome int

// The outcomes of a cancellation.
const (
	// CancelSignalled: pg_cancel_backend signalled the backend.
	CancelSignalled CancelOutcome = iota + 1
	// CancelNotFound: the backend (pid and backend_start) no longer existed;
	// nothing was signalled.
	CancelNotFound
	// CancelProtocol: the protocol cancel request was delivered.
	CancelProtocol
	// CancelClosed: the connection was closed instead.
	CancelClosed
)

// String returns the outcome's name.
func (o CancelOutcome) String() string {
	switch o {
	case CancelSignalled:
		return "signalled"
	case CancelNotFound:
		return "not_found"
	case CancelProtocol:
		return "protocol"
	case CancelClosed:
		return "closed"
	}
	return "unknown"
}

// TraceCancelData describes a finished cancellation.
type TraceCancelData struct {
	// PID is the backend's process id.
	PID     uint32
	Mode    CancelMode
	Outcome CancelOutcome
	// FellBack reports that the cancel pool failed and a fallback was used.
	FellBack bool
	// Latency is the time from the context's end to the cancel's answer.
	Latency time.Duration
}

// RetryBudgetTracer is an optional interface of a Config.Tracer: it receives
// an event when the retry budget refuses a retry.
type RetryBudgetTracer interface {
	TraceRetryBudgetExhausted(ctx context.Context, data TraceRetryBudgetData)
}

// TraceRetryBudgetData describes a refused retry.
type TraceRetryBudgetData struct {
	Label   string
	Attempt int
	// Err is the attempt's error, which the call returns (marked with
	// ErrRetryBudgetExhausted), and Class its class.
	Err   error
	Class Class
}
