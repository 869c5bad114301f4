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
