package pgtx

import (
	"context"
	"time"
)

// TransactionTracer traces [Transaction] calls and their attempts, in the
// style of pgx's tracers: [Config].Tracer receives an event at the start and
// at the end of every call and of every attempt. Every start has exactly one
// end. A nil Config.Tracer costs nothing. A tracer that also implements
// [CancelTracer] or [BreakerTracer] receives those events too.
// Implementations must be safe for concurrent use and should return
// quickly: they run on the call's path.
type TransactionTracer interface {
	// TraceTransactionStart is called when a call starts. The context it
	// returns is the parent of every attempt's context, so a span started
	// here spans all attempts and backoffs.
	TraceTransactionStart(ctx context.Context, data TraceTransactionStartData) context.Context

	// TraceTransactionEnd is called once the call has ended, with the
	// context TraceTransactionStart returned.
	TraceTransactionEnd(ctx context.Context, data TraceTransactionEndData)

	// TraceAttemptStart is called before an attempt acquires its
	// connection. The context it returns is the attempt's context: fn
	// receives it, and TraceAttemptEnd gets it, so a span started here nests
	// the attempt's work.
	TraceAttemptStart(ctx context.Context, data TraceAttemptStartData) context.Context

	// TraceAttemptEnd is called after the attempt has released its
	// connection and the retry decision is made, before any backoff. A
	// retry the retry budget refused ends with Retry false and an Err
	// matching [ErrRetryBudgetExhausted].
	TraceAttemptEnd(ctx context.Context, data TraceAttemptEndData)
}

// TraceTransactionStartData describes a call about to start.
type TraceTransactionStartData struct {
	// Label is [Options].Label.
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

// TraceAttemptStartData describes an attempt about to start.
type TraceAttemptStartData struct {
	Label     string
	Isolation Isolation
	// Attempt counts the call's attempts from 1.
	Attempt int
}

// TraceAttemptEndData describes a finished attempt.
type TraceAttemptEndData struct {
	Label     string
	Isolation Isolation
	Attempt   int
	// Err is the attempt's error; nil when it committed. When no retry
	// follows it is the error the call returns.
	Err error
	// Class is the class of the attempt's error (the zero Class, "none", when it
	// committed).
	Class Class
	// Duration is the attempt's wall time, acquire to release.
	Duration time.Duration
	// Retry reports whether another attempt follows, after Backoff,
	// unless the context ends first: after an unavailable server, the last
	// pause before a deadline lasts until the deadline, and a little past
	// it (see [RetryConfig].UnavailableTimeout).
	Retry   bool
	Backoff time.Duration
	// AdmissionWait is how long the attempt waited at the contention
	// manager's gate ([ContentionConfig]) before it acquired a connection,
	// and Limit the label's limit it was admitted under; 0 when the gate
	// was not limiting.
	AdmissionWait time.Duration
	Limit         int
}

// CancelTracer is an optional interface of a [Config].Tracer: it receives an
// event for every statement cancelled because its context ended, once the
// cancel has finished.
type CancelTracer interface {
	TraceCancel(ctx context.Context, data TraceCancelData)
}

// TraceCancelData describes a finished cancellation.
type TraceCancelData struct {
	// PID is the backend's process id.
	PID uint32
	// Mode is the pool's [CancelMode].
	Mode CancelMode
	// How the cancellation ended: Closed reports that the connection was
	// closed instead of kept (in [CancelModeClose], or because the cancel
	// could not be confirmed finished in time); NotFound that
	// pg_cancel_backend found the backend (pid and backend_start) gone, so
	// nothing was signalled; FellBack that the cancel pool failed and the
	// protocol cancel request was sent instead. In [CancelModePool] with none
	// of them set, pg_cancel_backend signalled the backend; in
	// [CancelModeProtocol], the protocol cancel request was delivered.
	Closed   bool
	NotFound bool
	FellBack bool
	// Latency is the time from the context's end to the cancel's answer.
	Latency time.Duration
}
