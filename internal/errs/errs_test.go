package errs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestErrorsMatch: what each error type matches with errors.Is, and its
// message.
func TestErrorsMatch(t *testing.T) {
	cause := fmt.Errorf("read: %w", io.ErrUnexpectedEOF)
	fnErr := errors.New("fn's own")
	arg := &InvalidArgError{Msg: "nil fn"}
	tests := []struct {
		name    string
		err     error
		matches []error
		not     []error
		msg     string
	}{
		{"commit unknown", &CommitUnknownError{Err: cause}, []error{ErrCommitUnknown, cause, io.ErrUnexpectedEOF}, []error{ErrInvalidArgument, ErrNonRetryable},
			"pgtx: commit outcome unknown: connection lost while COMMIT was in flight: read: unexpected EOF"},
		{"commit unknown, with why", &CommitUnknownError{Err: cause, Why: "no answer"}, []error{ErrCommitUnknown, cause}, nil,
			"pgtx: commit outcome unknown: connection lost while COMMIT was in flight (no answer): read: unexpected EOF"},
		{"invalid argument", arg, []error{ErrInvalidArgument}, []error{ErrNonRetryable, ErrCommitUnknown}, "pgtx: invalid argument: nil fn"},
		{"misuse with fn's error", &MisuseError{InvalidArgError: arg, FnErr: fnErr}, []error{ErrInvalidArgument, ErrNonRetryable, fnErr}, []error{ErrCommitUnknown}, "pgtx: invalid argument: nil fn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, target := range tt.matches {
				if !errors.Is(tt.err, target) {
					t.Errorf("errors.Is(%v, %v) = false", tt.err, target)
				}
			}
			for _, target := range tt.not {
				if errors.Is(tt.err, target) {
					t.Errorf("errors.Is(%v, %v) = true", tt.err, target)
				}
			}
			if got := tt.err.Error(); got != tt.msg {
				t.Errorf("Error() = %q, want %q", got, tt.msg)
			}
		})
	}
	if errors.Is(ErrCommitUnknown, io.ErrUnexpectedEOF) {
		t.Errorf("the sentinel itself must not match the cause")
	}
}

func TestWithContext(t *testing.T) {
	db := &pgconn.PgError{Code: "57014"}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	already := fmt.Errorf("x: %w", context.Canceled)
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		same bool // returned unchanged
	}{
		{"live context", context.Background(), db, true},
		{"nil error", cancelled, nil, true},
		{"already matches", cancelled, already, true},
		{"ended context", cancelled, db, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := WithContext(tt.ctx, tt.err)
			if tt.same {
				if got != tt.err {
					t.Errorf("WithContext = %v, want the error unchanged", got)
				}
				return
			}
			var pgErr *pgconn.PgError
			if !errors.Is(got, context.Canceled) || !errors.As(got, &pgErr) || pgErr.Code != "57014" {
				t.Errorf("want both context.Canceled and the 57014: %v", got)
			}
			if got.Error() != "context canceled: "+db.Error() {
				t.Errorf("Error() = %q", got.Error())
			}
		})
	}
}
