package pgtx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/pgtx-go/pgtx/internal/errs"

	"github.com/jackc/pgx/v5/pgconn"
)

type myErr struct{ id int }

func (e *myErr) Error() string { return fmt.Sprintf("my error %d", e.id) }

func TestNonRetryableKeepsIdentity(t *testing.T) {
	if NonRetryable(nil) != nil {
		t.Fatal("NonRetryable(nil) != nil")
	}
	inner := &myErr{id: 7}
	err := NonRetryable(fmt.Errorf("wrapped: %w", inner))
	var got *myErr
	if !errors.As(err, &got) || got.id != 7 {
		t.Errorf("errors.As lost the caller's error: %v", err)
	}
	if !errors.Is(err, inner) {
		t.Errorf("errors.Is lost the caller's error")
	}
	if err.Error() != "wrapped: my error 7" {
		t.Errorf("Error() = %q: NonRetryable must not change the message", err.Error())
	}
	if Classify(NonRetryable(pgErr(pgerrcode.SerializationFailure))).Retryable() {
		t.Errorf("NonRetryable(40001) is retryable")
	}
	if sqlState(NonRetryable(pgErr(pgerrcode.SerializationFailure))) != pgerrcode.SerializationFailure {
		t.Errorf("NonRetryable hides the SQLSTATE")
	}
}

func TestAcquireTimeoutIsNotTheCallersDeadline(t *testing.T) {
	err := error(&acquireTimeoutError{timeout: 2 * time.Second})
	if !errors.Is(err, ErrAcquireTimeout) {
		t.Errorf("not ErrAcquireTimeout: %v", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an acquire timeout must not claim the caller's deadline passed")
	}
}

// sqlState returns the SQLSTATE of the first *pgconn.PgError in err's tree,
// or "".
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// lostCommit is the error Transaction returns for a COMMIT lost with err.
func lostCommit(err error) error { return &errs.CommitUnknownError{Err: err} }

// TestCommitUnknownIsTheRootsError: a lost COMMIT's error reads as the
// sentinel's text with COMMIT's error after it, matches ErrCommitUnknown
// (one value, the root's and the internal packages') and keeps COMMIT's
// error.
func TestCommitUnknownIsTheRootsError(t *testing.T) {
	cause := io.ErrUnexpectedEOF
	err := lostCommit(cause)
	if !errors.Is(err, ErrCommitUnknown) || !errors.Is(err, cause) {
		t.Errorf("%v: matches ErrCommitUnknown %v, its cause %v; want both", err, errors.Is(err, ErrCommitUnknown), errors.Is(err, cause))
	}
	if want := ErrCommitUnknown.Error() + ": " + cause.Error(); err.Error() != want {
		t.Errorf("text %q, want %q", err, want)
	}
}

// TestOneSentinelPerError: the root's sentinels are the values the internal
// packages make their errors match, with the texts their docs state, so no
// bridge is needed for errors.Is to hold.
func TestOneSentinelPerError(t *testing.T) {
	tests := []struct {
		root, internal error
		text           string
	}{
		{ErrCommitUnknown, errs.ErrCommitUnknown, "pgtx: commit outcome unknown: connection lost while COMMIT was in flight"},
		{ErrInvalidArgument, errs.ErrInvalidArgument, "pgtx: invalid argument"},
	}
	for _, tt := range tests {
		if tt.root != tt.internal || tt.root.Error() != tt.text {
			t.Errorf("%q: the root's and the internal value differ, or the text is not %q", tt.root, tt.text)
		}
	}
	if err := (&errs.MisuseError{InvalidArgError: &errs.InvalidArgError{Msg: "fn called tx.Commit"}}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("%v does not match ErrInvalidArgument", err)
	}
}
