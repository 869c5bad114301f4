package pgtx

import (
	"context"
	"errors"
	"fmt"
	"github.com/jackc/pgerrcode"
	"io"
	"testing"
	"time"

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

func TestCommitUnknownWrapsOriginal(t *testing.T) {
	orig := fmt.Errorf("read: %w", io.ErrUnexpectedEOF)
	err := error(&commitUnknownError{err: orig})
	if !errors.Is(err, ErrCommitUnknown) || !errors.Is(err, io.ErrUnexpectedEOF) || !errors.Is(err, orig) {
		t.Errorf("commit-unknown error lost an identity: %v", err)
	}
	if errors.Is(ErrCommitUnknown, io.ErrUnexpectedEOF) {
		t.Errorf("the sentinel itself must not match the cause")
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

func TestWithContextErr(t *testing.T) {
	db := &pgconn.PgError{Code: pgerrcode.QueryCanceled}
	live := context.Background()
	if withContextErr(live, db) != error(db) {
		t.Errorf("a live context must leave the error alone")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := withContextErr(ctx, db)
	var pgE *pgconn.PgError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &pgE) || pgE.Code != pgerrcode.QueryCanceled {
		t.Errorf("want both context.Canceled and the 57014: %v", err)
	}
	already := fmt.Errorf("x: %w", context.Canceled)
	if withContextErr(ctx, already) != already {
		t.Errorf("an error that already matches must be returned unchanged")
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
