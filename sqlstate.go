package pgtx

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/retry"
)

// Class is what pgtx does with an error: retry the whole transaction, back
// off, give up, or report an unknown outcome. The zero Class, "none", is a
// nil error's. See the [retries guide].
//
// [retries guide]: https://github.com/pgtx-go/pgtx/blob/main/docs/retries.md
type Class int

const classNone Class = 0

// The error classes of pgtx.
const (
	// ClassConflict is 40001 serialization_failure and 40P01
	// deadlock_detected: retried up to [RetryConfig].MaxRetries times.
	ClassConflict Class = iota + 1
	// ClassOverload is the server or a pooler shedding load: retried up to
	// [RetryConfig].MaxAdaptiveRetries times.
	ClassOverload
	// ClassUnavailable is a server that could not be reached but may come
	// back: retried up to [RetryConfig].UnavailableTimeout.
	ClassUnavailable
	// ClassConnectionLost is a connection that died before COMMIT was sent
	// (08xxx, 57P01, 57P02, reset, EOF): run again on a fresh connection.
	ClassConnectionLost
	// ClassAmbiguous is a connection lost while COMMIT was in flight: never
	// retried; the error matches [ErrCommitUnknown].
	ClassAmbiguous
	// ClassTimeout is 57014 query_canceled, 25P03, 25P04, a context error,
	// [ErrAcquireTimeout] or [ErrQueueFull]: never retried.
	ClassTimeout
	// ClassPermanent is everything else, errors wrapped by [NonRetryable]
	// included: never retried.
	ClassPermanent
)

// String returns the class's name in traces and metrics.
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

// Retryable reports whether an error of class c is retried.
func (c Class) Retryable() bool { return retry.Retryable(classify.Class(c)) }

// Classify returns the class of err outside of COMMIT, looking through
// wrapped and joined errors (docs/retries.md).
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

// isUniqueViolation reports a unique or exclusion violation that the caller
// did not mark NonRetryable.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.UniqueViolation || pgErr.Code == pgerrcode.ExclusionViolation) &&
		!errors.Is(err, errNonRetryableMarker)
}
