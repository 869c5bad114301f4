package pgtx

import (
	"context"
	"errors"
	"time"

	"github.com/pgtx-go/pgtx/internal/errs"
	"github.com/pgtx-go/pgtx/internal/retry"
)

// ErrCommitUnknown is matched (errors.Is) by the error [Transaction] returns
// when the connection was lost while COMMIT was in flight and nothing could
// tell what became of it: the transaction may or may not have committed, so
// it is never run again. The error also wraps the original network error.
// Its text is "pgtx: commit outcome unknown: connection lost while COMMIT
// was in flight".
var ErrCommitUnknown = errs.ErrCommitUnknown

// ErrAcquireTimeout is matched (errors.Is) by the error [Transaction] returns
// when the pool could not hand out a connection within [Config].AcquireTimeout
// while the caller's context was still live. It is not retried.
var ErrAcquireTimeout = errors.New("pgtx: timed out waiting for a pool connection")

// ErrInvalidArgument is matched (errors.Is) by the error [Transaction]
// returns for bad input (an unknown isolation level, a nil pool or fn, a
// Config NewWithConfig cannot use) and for misuse (fn calling Commit or
// Rollback, leaving rows open, ending the transaction with a statement of
// its own). Such a call is not retried, and Transaction commits nothing:
// only a COMMIT statement fn ran itself has committed what came before it
// (see [Transaction]). Its text is "pgtx: invalid argument".
var ErrInvalidArgument = errs.ErrInvalidArgument

var errNonRetryableMarker = errs.ErrNonRetryable

// NonRetryable wraps err so that [Transaction] does not run the transaction
// again, whatever err wraps. The result unwraps to err; NonRetryable(nil)
// returns nil.
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &nonRetryableError{err: err}
}

type nonRetryableError struct{ err error }

func (e *nonRetryableError) Error() string { return e.err.Error() }
func (e *nonRetryableError) Unwrap() error { return e.err }
func (e *nonRetryableError) Is(target error) bool {
	return target == errNonRetryableMarker
}

// acquireTimeoutError does not match context.DeadlineExceeded, which would
// say the caller's own deadline passed.
type acquireTimeoutError struct {
	timeout    time.Duration
	connecting bool
	// heldBy says whose call held a connection through the wait:
	// sameContext, a context with the waiter's Done channel; neverDone,
	// one that is never done as the waiter's (which a channel cannot tell
	// apart); 0: no such call.
	heldBy heldBy
}

// heldBy is what a timed-out acquire knows of a call that may be its
// caller.
type heldBy int

const (
	sameContext heldBy = iota + 1
	neverDone
)

func (e *acquireTimeoutError) Error() string {
	msg := ErrAcquireTimeout.Error() + " (AcquireTimeout " + e.timeout.String()
	if e.connecting {
		msg += ", connecting to the server"
	}
	msg += ")"
	switch e.heldBy {
	case sameContext:
		msg += "; a connection of the pool is held by a call with the same context: " +
			"a Transaction called inside fn must be given fn's ctx, not the request's, " +
			"or it waits for the connection its caller holds"
	case neverDone:
		msg += "; a connection of the pool is held by a call whose context is never done, as this one's " +
			"(context.Background()): if this call runs inside that call's fn, give it fn's ctx, " +
			"or it waits for the connection its caller holds"
	}
	return msg
}
func (e *acquireTimeoutError) Is(target error) bool {
	return target == ErrAcquireTimeout
}

// withContextErr makes err match ctx.Err() when ctx has ended.
func withContextErr(ctx context.Context, err error) error { return errs.WithContext(ctx, err) }

// invalidArg returns a bad-input error: it matches [ErrInvalidArgument]
// and says so first.
func invalidArg(msg string) error { return &errs.InvalidArgError{Msg: msg} }

// errNested refuses a Transaction inside one of the same pool, which
// would commit on its own even when the outer one is retried.
var errNested = invalidArg("nested Transaction on the same pool: fn of a Transaction called Transaction again with its ctx; " +
	"pass its pgx.Tx down instead (tx.Begin makes a savepoint), or start the second transaction after the first returns")

// RetryError is the error [Transaction] returns when the call was retried,
// a retry was refused, or it could not connect. Its message says why it
// stopped, for example
//
//	pgtx: gave up after 11 attempts (MaxRetries 10): ERROR: could not serialize access ... (SQLSTATE 40001)
//
// It unwraps to the last attempt's error and matches
// [ErrRetryBudgetExhausted] when the budget refused the retry. Do not retry
// a RetryError: pgtx already did. See docs/retries.md.
type RetryError struct {
	// Attempts is the number of attempts the call made.
	Attempts int
	// Reason says why no attempt followed, as a fixed word: "MaxRetries",
	// "MaxAdaptiveRetries", "UnavailableTimeout", "deadline", "budget",
	// "context" or "not retryable".
	Reason string
	// Err is the last attempt's error.
	Err error

	why retry.Why // why the call stopped, for the message
}

func (e *RetryError) Error() string {
	return e.why.Message(e.Attempts, e.Err, func(err error) string { return Classify(err).String() })
}

// Unwrap returns the last attempt's error.
func (e *RetryError) Unwrap() error { return e.Err }

// Is matches [ErrRetryBudgetExhausted] when the budget refused the retry.
func (e *RetryError) Is(target error) bool {
	return target == ErrRetryBudgetExhausted && e.why.Stop == retry.BudgetSpent
}

// ErrQueueFull is matched (errors.Is) by the error [Transaction] returns at
// once when [Config].MaxWaiters callers already wait. It is not retried.
var ErrQueueFull = errors.New("pgtx: too many callers waiting for a pool connection")

// ErrRetryBudgetExhausted is matched (errors.Is) by the error [Transaction]
// returns when the pool's retry budget refused an overload or
// lost-connection retry. The error also wraps the last database error.
var ErrRetryBudgetExhausted = errors.New("pgtx: retry budget exhausted")
