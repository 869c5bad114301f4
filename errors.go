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
// it is never run again. It means exactly that, never misuse and never a
// definitive failure. The error also wraps the original network error.
var ErrCommitUnknown = errs.ErrCommitUnknown

// ErrAcquireTimeout is matched (errors.Is) by the error [Transaction] returns
// when the pool could not hand out a connection within [Config].AcquireTimeout
// while the caller's context was still live. It is not retried: retrying a
// pool wait is how a connection-timeout storm starts.
var ErrAcquireTimeout = errors.New("pgtx: timed out waiting for a pool connection")

// ErrInvalidArgument is matched (errors.Is) by the error [Transaction]
// returns for bad input (an unknown isolation level, a nil pool or fn, a
// Config NewWithConfig cannot use) and for misuse (fn calling Commit or
// Rollback, leaving rows open, ending the transaction with a statement of
// its own). Such a call is not retried, and Transaction commits nothing:
// only a COMMIT statement fn ran itself has committed what came before it
// (see [Transaction]).
var ErrInvalidArgument = errs.ErrInvalidArgument

// errNonRetryableMarker is what a NonRetryable error matches so Classify can
// find it anywhere in an error tree.
var errNonRetryableMarker = errs.ErrNonRetryable

// NonRetryable wraps err so that [Transaction] does not run the transaction
// again, whatever err wraps (a serialization failure included). The result
// unwraps to err, so errors.Is and errors.As still find the caller's error.
// NonRetryable(nil) returns nil.
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

// commitUnknownError is the ambiguous-COMMIT error ([errs.CommitUnknownError]):
// it matches ErrCommitUnknown and unwraps to the error COMMIT returned.
type commitUnknownError = errs.CommitUnknownError

// acquireTimeoutError is returned when the acquire timeout, not the caller,
// ended the pool wait. It matches ErrAcquireTimeout only: it deliberately does
// not match context.DeadlineExceeded, which would say the caller's own
// deadline passed.
//
// connecting says that the pool had room and was connecting to the server
// when the timeout came: the wait was for a connect, not for a connection
// another caller held.
type acquireTimeoutError struct {
	timeout    time.Duration
	connecting bool
}

func (e *acquireTimeoutError) Error() string {
	if e.connecting {
		return ErrAcquireTimeout.Error() + " (AcquireTimeout " + e.timeout.String() + ", connecting to the server)"
	}
	return ErrAcquireTimeout.Error() + " (AcquireTimeout " + e.timeout.String() + ")"
}
func (e *acquireTimeoutError) Is(target error) bool {
	return target == ErrAcquireTimeout
}

// withContextErr returns err such that errors.Is(result, ctx.Err()) holds when
// ctx has ended; it returns err unchanged when it already matches or ctx is
// live.
func withContextErr(ctx context.Context, err error) error { return errs.WithContext(ctx, err) }

// invalidArgError is a bad-input error that matches ErrInvalidArgument
// ([errs.InvalidArgError]).
type invalidArgError = errs.InvalidArgError

// nestedError is the error of a call made with a context that is already
// inside a Transaction of the same pool: the inner transaction would take
// a second connection (waiting out AcquireTimeout on a small pool) and
// commit on its own even when the outer one is retried. It matches
// ErrInvalidArgument.
type nestedError struct{}

func (nestedError) Error() string {
	return "pgtx: invalid argument: nested Transaction on the same pool: fn of a Transaction called Transaction again with its ctx; " +
		"pass its pgx.Tx down instead (tx.Begin makes a savepoint), or start the second transaction after the first returns"
}
func (nestedError) Is(target error) bool {
	return target == ErrInvalidArgument
}

// RetryError is the error [Transaction] returns when the call ended after
// more than one attempt, when a retry was refused (the cap, the context's
// deadline, the retry budget), or when the call ended on a server it could
// not connect to: its message says how many attempts were made and why
// there were no more, for example
//
//	pgtx: gave up after 11 attempts (MaxRetries 10): ERROR: could not serialize access ... (SQLSTATE 40001)
//
// A call that ended on an unreachable server says so first, however it
// ended, even after a single attempt, and for how long it was unreachable:
//
//	pgtx: the server is unreachable: gave up after 13 attempts in 15s (UnavailableTimeout 15s): failed to connect to ...
//
// It unwraps to the last attempt's error, so errors.As still finds the
// *pgconn.PgError and errors.Is the caller's errors and the sentinels (and
// the context's error, when the context ended the call), and [Classify]
// returns that error's class; it matches [ErrRetryBudgetExhausted] when
// the budget refused the retry. An error that ended a first attempt and
// would never have been retried (fn's own error, say) is returned as it
// is, and so is the error of a first attempt the context ended, unless the
// server was unreachable. An outer retry loop should not retry a
// RetryError: pgtx already did.
type RetryError struct {
	// Attempts is the number of attempts the call made.
	Attempts int
	// Reason says why no attempt followed the last one, as a fixed word
	// (compare it with ==, as [net.OpError].Op):
	//
	//   - "MaxRetries", "MaxAdaptiveRetries", "UnavailableTimeout": that
	//     setting of [RetryConfig] (or [Options]) ended the retries: its cap
	//     was reached, its bound passed, or it is switched off;
	//   - "deadline": the next retry would have ended past the context's
	//     deadline, so the call returned while the caller still had time;
	//   - "budget": the retry budget refused the retry (the error matches
	//     [ErrRetryBudgetExhausted]);
	//   - "context": the context ended (the error matches its error);
	//   - "not retryable": Err's class is never retried ([Classify]).
	Reason string
	// Err is the last attempt's error.
	Err error

	why retry.Why // why the call stopped, for the message
}

// Error says what happened when the server was unreachable, then how many
// attempts there were, why they stopped, and the last error.
func (e *RetryError) Error() string {
	return e.why.Message(e.Attempts, e.Err, func(err error) string { return Classify(err).String() })
}

// Unwrap returns the last attempt's error.
func (e *RetryError) Unwrap() error { return e.Err }

// Is reports whether the budget refused the retry (target
// [ErrRetryBudgetExhausted]).
func (e *RetryError) Is(target error) bool {
	return target == ErrRetryBudgetExhausted && e.why.Stop == retry.BudgetSpent
}
