package pgtx

import (
	"context"
	"errors"
	"strconv"

	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/retry"
)

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
