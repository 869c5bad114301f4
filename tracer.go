package pgtx

import (
	"context"
	"time"
)

// TransactionTracer traces [Transaction] calls and their attempts, as pgx's
// tracers do: every start has exactly one end. Implementations must be
// safe for concurrent use and return quickly: they run on the call's path.
// See the [observability guide].
//
// [observability guide]: https://github.com/pgtx-go/pgtx/blob/main/docs/observability.md
type TransactionTracer interface {
	// TraceTransactionStart is called when a call starts; the context it
	// returns is the parent of every attempt's.
	TraceTransactionStart(ctx context.Context, data TraceTransactionStartData) context.Context

	// TraceTransactionEnd is called once the call has ended, with the
	// context TraceTransactionStart returned.
	TraceTransactionEnd(ctx context.Context, data TraceTransactionEndData)

	// TraceAttemptStart is called before an attempt acquires its
	// connection; the context it returns is the one fn receives.
	TraceAttemptStart(ctx context.Context, data TraceAttemptStartData) context.Context

	// TraceAttemptEnd is called after the retry decision, before any backoff.
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
	// Err is the attempt's error; nil when it committed.
	Err error
	// Class is Err's class.
	Class Class
	// Duration is the attempt's wall time, acquire to release.
	Duration time.Duration
	// Retry reports whether another attempt follows, after Backoff.
	Retry   bool
	Backoff time.Duration
	// AdmissionWait is the attempt's wait at the contention manager's gate
	// and Limit the label's limit then; 0 when the gate was not limiting.
	AdmissionWait time.Duration
	Limit         int
}

// CancelTracer is an optional interface of a [Config].Tracer, told of every
// cancelled statement.
type CancelTracer interface {
	TraceCancel(ctx context.Context, data TraceCancelData)
}

// TraceCancelData describes a finished cancellation.
type TraceCancelData struct {
	// PID is the backend's process id.
	PID uint32
	// Mode is the pool's [CancelMode].
	Mode CancelMode
	// Closed reports that the connection was closed instead of kept;
	// NotFound that the backend was gone, so nothing was signalled;
	// FellBack that the protocol cancel request replaced the cancel pool's.
	Closed   bool
	NotFound bool
	FellBack bool
	// Latency is the time from the context's end to the cancel's answer.
	Latency time.Duration
}
