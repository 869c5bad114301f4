package pgtxsql

import (
	"context"
	"errors"

	"github.com/pgtx-go/pgtx"
)

// invalidArg is a bad-input error: it matches [pgtx.ErrInvalidArgument]
// and says so first, as the root's do.
type invalidArg string

func (e invalidArg) Error() string        { return pgtx.ErrInvalidArgument.Error() + ": " + string(e) }
func (e invalidArg) Is(target error) bool { return target == pgtx.ErrInvalidArgument }

// ctxError is an error of a statement that ctx ended: it matches both the
// statement's error (the server's 57014, say) and ctx.Err().
type ctxError struct{ err, ctxErr error }

func (e *ctxError) Error() string   { return e.err.Error() + " (" + e.ctxErr.Error() + ")" }
func (e *ctxError) Unwrap() []error { return []error{e.err, e.ctxErr} }

// withContextErr makes err match ctx.Err() when ctx ended the statement.
func withContextErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cerr := ctx.Err()
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return &ctxError{err: err, ctxErr: cerr}
}
