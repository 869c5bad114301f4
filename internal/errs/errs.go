package errs

import (
	"context"
	"errors"
)

// ErrCommitUnknown is pgtx.ErrCommitUnknown, the one value of both: the
// connection was lost while COMMIT was in flight and nothing could tell
// what became of it.
var ErrCommitUnknown = errors.New("pgtx: commit outcome unknown: connection lost while COMMIT was in flight")

// ErrInvalidArgument is pgtx.ErrInvalidArgument, the one value of both:
// bad input, or misuse of the transaction by fn.
var ErrInvalidArgument = errors.New("pgtx: invalid argument")

// ErrNonRetryable is what an error that must never be retried matches, so
// that pgtx.Classify finds it anywhere in an error tree.
var ErrNonRetryable = errors.New("pgtx: non-retryable")

// CommitUnknownError is the ambiguous-COMMIT error: it matches
// [ErrCommitUnknown] and unwraps to the error COMMIT returned (Err). Why says,
// when a resolution was tried, why it could not tell.
type CommitUnknownError struct {
	Err error
	Why string
}

func (e *CommitUnknownError) Error() string {
	if e.Why != "" {
		return ErrCommitUnknown.Error() + " (" + e.Why + "): " + e.Err.Error()
	}
	return ErrCommitUnknown.Error() + ": " + e.Err.Error()
}
func (e *CommitUnknownError) Unwrap() error { return e.Err }
func (e *CommitUnknownError) Is(target error) bool {
	return target == ErrCommitUnknown
}

// InvalidArgError is a bad-input error that matches [ErrInvalidArgument];
// its message is Msg after "pgtx: invalid argument: ", so a log says what
// errors.Is does.
type InvalidArgError struct{ Msg string }

func (e *InvalidArgError) Error() string        { return ErrInvalidArgument.Error() + ": " + e.Msg }
func (e *InvalidArgError) Is(target error) bool { return target == ErrInvalidArgument }

// MisuseError is a misuse error that also carries the error fn returned
// (FnErr). It is never retried, whatever fn's error is: it matches
// [ErrNonRetryable] as well as what its InvalidArgError matches.
type MisuseError struct {
	*InvalidArgError
	FnErr error
}

func (e *MisuseError) Unwrap() error { return e.FnErr }
func (e *MisuseError) Is(target error) bool {
	return e.InvalidArgError.Is(target) || target == ErrNonRetryable
}

// ContextError joins the caller's context error (CtxErr) to the error
// that ended the call (Err), so errors.Is(err, ctx.Err()) holds while the
// database error (57014, say) stays reachable with errors.As.
type ContextError struct {
	CtxErr error
	Err    error
}

func (e *ContextError) Error() string   { return e.CtxErr.Error() + ": " + e.Err.Error() }
func (e *ContextError) Unwrap() []error { return []error{e.CtxErr, e.Err} }

// WithContext returns err such that errors.Is(result, ctx.Err()) holds when
// ctx has ended; it returns err unchanged when it already matches or ctx is
// live.
func WithContext(ctx context.Context, err error) error {
	ctxErr := ctx.Err()
	if ctxErr == nil || err == nil || errors.Is(err, ctxErr) {
		return err
	}
	return &ContextError{CtxErr: ctxErr, Err: err}
}
