package txn

import (
	"errors"
	"strings"
	"testing"

	"github.com/pgtx-go/pgtx/internal/errs"
)

// TestMisuse: what Check decides fn left behind, and the message of each
// misuse; fn's own error stays reachable and makes the error never
// retried.
func TestMisuse(t *testing.T) {
	fnErr := errors.New("fn's own")
	tests := []struct {
		name       string
		err        error
		wantPrefix string // "" : no error
		wantFnErr  bool
	}{
		{"nothing left behind", leftBehind(false, "", false), "", false},
		{"fn called Commit", leftBehind(false, "Commit", false), "pgtx: invalid argument: fn called tx.Commit: Transaction ends the transaction itself (COMMIT when fn returns nil, ROLLBACK when it returns an error); return instead. Nothing was committed", false},
		{"fn called Rollback, rows open too", leftBehind(false, "Rollback", true), "pgtx: invalid argument: fn called tx.Rollback: ", false},
		{"a statement of fn's ended it", leftBehind(true, "Commit", true), "pgtx: invalid argument: fn ended the transaction itself with a statement, which the server ran as sent: a COMMIT or END committed", false},
		{"rows still open", leftBehind(false, "", true), "pgtx: invalid argument: fn returned with rows still open: close every pgx.Rows (rows.Close, or read them to the end) before fn returns. Nothing was committed", false},
		{"fn called Commit and failed", misuse("Commit", fnErr), "pgtx: invalid argument: fn called tx.Commit: ", true},
		{"a statement ended it and fn failed", endedError(fnErr), "pgtx: invalid argument: fn ended the transaction itself with a statement", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.wantPrefix == "" {
				if tt.err != nil {
					t.Fatalf("err = %v, want none", tt.err)
				}
				return
			}
			if tt.err == nil || !strings.HasPrefix(tt.err.Error(), tt.wantPrefix) {
				t.Fatalf("err = %v, want one starting %q", tt.err, tt.wantPrefix)
			}
			if !errors.Is(tt.err, errs.ErrInvalidArgument) {
				t.Errorf("err does not match ErrInvalidArgument")
			}
			if got := errors.Is(tt.err, fnErr); got != tt.wantFnErr {
				t.Errorf("errors.Is(err, fnErr) = %v, want %v", got, tt.wantFnErr)
			}
			if got := errors.Is(tt.err, errs.ErrNonRetryable); got != tt.wantFnErr {
				t.Errorf("errors.Is(err, ErrNonRetryable) = %v, want %v", got, tt.wantFnErr)
			}
			if strings.Contains(tt.err.Error(), fnErr.Error()) {
				t.Errorf("the message carries fn's error: %q", tt.err)
			}
		})
	}
}

// TestRefuse: fn's Commit and Rollback, before BEGIN, are refused and
// remembered; the first one called is the one the message names.
func TestRefuse(t *testing.T) {
	tx := &Tx{}
	if err := tx.Rollback(t.Context()); !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "tx.Rollback") {
		t.Errorf("Rollback = %v", err)
	}
	if err := tx.Commit(t.Context()); !strings.Contains(err.Error(), "tx.Rollback") {
		t.Errorf("Commit after Rollback = %v, want the Rollback named", err)
	}
	if err := tx.CheckFailed(errors.New("x")); !errors.Is(err, errs.ErrNonRetryable) {
		t.Errorf("CheckFailed = %v, want misuse", err)
	}
}
