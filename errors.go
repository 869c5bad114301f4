package pgtx

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/errs"
	"github.com/pgtx-go/pgtx/internal/retry"
)

// ErrCommitUnknown is matched (errors.Is) by the error [Transaction] returns
// when the connection was lost while COMMIT was in flight and nothing could
// tell what became of it: the transaction may or may not have committed, so
// it is never run again. The error also wraps the original network error.
var ErrCommitUnknown = errors.New("pgtx: commit outcome unknown: connection lost while COMMIT was in flight")

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

// commitUnknownError is the ambiguous-COMMIT error as Transaction returns
// it: the internal one ([errs.CommitUnknownError], with the same text),
// matching ErrCommitUnknown and unwrapping to the error COMMIT returned.
type commitUnknownError struct{ err *errs.CommitUnknownError }

func (e *commitUnknownError) Error() string        { return e.err.Error() }
func (e *commitUnknownError) Unwrap() error        { return e.err.Err }
func (e *commitUnknownError) Is(target error) bool { return target == ErrCommitUnknown }

// commitUnknown returns err, an ambiguous COMMIT's error, as
// [commitUnknownError] when it is the internal one.
func commitUnknown(err error) error {
	if cu, ok := err.(*errs.CommitUnknownError); ok {
		return &commitUnknownError{err: cu}
	}
	return err
}

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
	sameCtx    bool // a call with the waiting call's context holds a connection
}

func (e *acquireTimeoutError) Error() string {
	msg := ErrAcquireTimeout.Error() + " (AcquireTimeout " + e.timeout.String()
	if e.connecting {
		msg += ", connecting to the server"
	}
	msg += ")"
	if e.sameCtx {
		msg += "; a connection of the pool is held by a call with the same context: " +
			"a Transaction called inside fn must be given fn's ctx, not the request's, " +
			"or it waits for the connection its caller holds"
	}
	return msg
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

// Class is what pgtx does with an error: retry the whole transaction, back off,
// give up, or report an unknown outcome. The zero Class is the class of a nil
// error (its String is "none"): [Classify](nil) returns it, and so does a
// committed attempt's [TraceAttemptEndData].Class.
type Class int

// classNone is the zero Class, a nil error's.
const classNone Class = 0

// The error classes of pgtx.
const (
	// ClassConflict is 40001 serialization_failure and 40P01 deadlock_detected:
	// someone else committed, so the whole transaction runs again after a short
	// jittered pause, up to [RetryConfig].MaxRetries times.
	ClassConflict Class = iota + 1
	// ClassOverload is the server (or a pooler in front of it) shedding load:
	// 53300 too_many_connections, the poolers' admission errors, the
	// server's overload errors a pooler relays, and a connect that timed
	// out. Retried with exponential backoff and full jitter, at most
	// [RetryConfig].MaxAdaptiveRetries times.
	ClassOverload
	// ClassUnavailable is a connection that could not be made to a server
	// that may come back: refused, or reset or closed while connecting, no
	// read-write host while a standby is promoted, or 57P03
	// cannot_connect_now (the server is starting up, in recovery, or
	// shutting down). It is ridden out: retried until the context's
	// deadline or [RetryConfig].UnavailableTimeout, outside MaxRetries and
	// MaxAdaptiveRetries, and the pool's query methods wait for it too.
	ClassUnavailable
	// ClassConnectionLost is a connection that died before COMMIT was sent
	// (08xxx, 57P01, 57P02, reset, EOF, pgconn.ErrConnClosed). Nothing
	// was committed, so the transaction runs again on a fresh connection.
	ClassConnectionLost
	// ClassAmbiguous is a connection lost while COMMIT was in flight: the
	// transaction may or may not have committed. Never retried; the error
	// matches [ErrCommitUnknown].
	ClassAmbiguous
	// ClassTimeout is 57014 query_canceled, 25P03, 25P04, a context error,
	// [ErrAcquireTimeout] or [ErrQueueFull]. Never retried: what took too long
	// takes too long again, and a full pool queue is the pool shedding load.
	ClassTimeout
	// ClassPermanent is everything else: constraint, syntax and data errors,
	// authentication failures, a database, host or socket that does not
	// exist, the caller's own errors and errors wrapped by [NonRetryable].
	ClassPermanent
)

// String returns the lower-case name of the class, as used in traces and
// metrics.
func (c Class) String() string {
	switch c {
	case classNone:
		return "none"
	case ClassConflict:
		return "conflict"
	case ClassOverload:
		return "overload"
	case ClassUnavailable:
		return "unavailable"
	case ClassConnectionLost:
		return "connection_lost"
	case ClassAmbiguous:
		return "ambiguous"
	case ClassTimeout:
		return "timeout"
	case ClassPermanent:
		return "permanent"
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// Retryable reports whether pgtx runs a transaction again after an error of
// class c.
func (c Class) Retryable() bool { return retry.Retryable(classify.Class(c)) }

// Classify returns the class of err as [Transaction] sees it outside of
// COMMIT, looking through wrapped and joined errors. Explicit decisions
// come first ([NonRetryable], [ErrCommitUnknown]), then a spent budget of
// the caller (context errors, [ErrAcquireTimeout], [ErrQueueFull]), then a
// connect that found no read-write host (unavailable), then the SQLSTATE
// of the first PgError (or a pooler's error text), then network failures;
// everything else is permanent. docs/retries.md has the table.
func Classify(err error) Class {
	if err == nil {
		return classNone
	}
	if errors.Is(err, errNonRetryableMarker) {
		return ClassPermanent
	}
	if errors.Is(err, ErrCommitUnknown) {
		return ClassAmbiguous
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrAcquireTimeout) ||
		errors.Is(err, ErrQueueFull) {
		return ClassTimeout
	}
	return Class(classify.Err(err))
}

// ErrQueueFull is matched (errors.Is) by the error [Transaction] returns at
// once, without waiting, when Config.MaxWaiters callers already wait for a
// connection of the pool. It is not retried: it is the pool shedding load.
var ErrQueueFull = errors.New("pgtx: too many callers waiting for a pool connection")

// ErrRetryBudgetExhausted is matched (errors.Is) by the error [Transaction]
// returns when an overload or lost-connection retry was refused because the
// pool's retry budget was spent (the retries of a server that cannot be
// reached wait for the budget instead). The error also wraps the last database
// error, which stays reachable with errors.As.
var ErrRetryBudgetExhausted = errors.New("pgtx: retry budget exhausted")
