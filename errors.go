package pgtx

import (
	"context"
	"errors"
	"time"
)

// ErrCommitUnknown is matched (errors.Is) by the error Transaction returns when
// the connection was lost while COMMIT was in flight: the transaction may or
// may not have committed, so it is never run again. The error also wraps the
// original network error.
var ErrCommitUnknown = errors.New("pgtx: commit outcome unknown: connection lost while COMMIT was in flight")

// ErrAcquireTimeout is matched (errors.Is) by the error Transaction returns
// when the pool could not hand out a connection within Config.AcquireTimeout
// while the caller's context was still live. It is not retried: retrying a
// pool wait is how a connection-timeout storm starts.
var ErrAcquireTimeout = errors.New("pgtx: timed out waiting for a pool connection")

// ErrInvalidArgument is matched (errors.Is) by the error Transaction returns
// for bad input (unknown isolation level, nil pool, nil fn, negative timeout).
// Nothing is sent to the server in that case.
var ErrInvalidArgument = errors.New("pgtx: invalid argument")

// errNonRetryableMarker is what a NonRetryable error matches so Classify can
// find it anywhere in an error tree.
var errNonRetryableMarker = errors.New("pgtx: non-retryable")

// NonRetryable wraps err so that Transaction does not run the transaction
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

// commitUnknownError is the ambiguous-COMMIT error: it matches
// ErrCommitUnknown and unwraps to the error COMMIT returned.
type commitUnknownError struct{ err error }

func (e *commitUnknownError) Error() string {
	return ErrCommitUnknown.Error() + ": " + e.err.Error()
}
func (e *commitUnknownError) Unwrap() error { return e.err }
func (e *commitUnknownError) Is(target error) bool {
	return target == ErrCommitUnknown
}

// acquireTimeoutError is returned when the acquire timeout, not the caller,
// ended the pool wait. It matches ErrAcquireTimeout only: it deliberately does
// not match context.DeadlineExceeded, which would say the caller's own
// deadline passed.
type acquireTimeoutError struct{ timeout time.Duration }

func (e *acquireTimeoutError) Error() string {
	return ErrAcquireTimeout.Error() + " (AcquireTimeout " + e.timeout.String() + ")"
}
func (e *acquireTimeoutError) Is(target error) bool {
	return target == ErrAcquireTimeout
}

// contextError joins the caller's context error to the error that ended the
// call, so errors.Is(err, ctx.Err()) holds while the database error (57014,
// say) stays reachable with errors.As.
type contextError struct {
	ctxErr error
	err    error
}

func (e *contextError) Error() string   { return e.ctxErr.Error() + ": " + e.err.Error() }
func (e *contextError) Unwrap() []error { return []error{e.ctxErr, e.err} }

// withContextErr returns err such that errors.Is(result, ctx.Err()) holds when
// ctx has ended; it returns err unchanged when it already matches or ctx is
// live.
func withContextErr(ctx context.Context, err error) error {
	ctxErr := ctx.Err()
	if ctxErr == nil || err == nil || errors.Is(err, ctxErr) {
		return err
	}
	return &contextError{ctxErr: ctxErr, err: err}
}

// invalidArgError is a bad-input error that matches ErrInvalidArgument.
type invalidArgError struct{ msg string }

func (e *invalidArgError) Error() string        { return "pgtx: " + e.msg }
func (e *invalidArgError) Is(target error) bool { return target == ErrInvalidArgument }
