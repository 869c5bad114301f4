package retry

import (
	"context"
	"time"

	"github.com/pgtx-go/pgtx/internal/classify"
)

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
