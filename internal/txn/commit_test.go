package txn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/errs"
)

// errRollbackTag stands for COMMIT answered with the tag ROLLBACK.
var errRollbackTag = errors.New("ROLLBACK")

// TestCommitOutcome: what each answer to COMMIT means (the COMMIT rows of
// DESIGN.md's error classes).
func TestCommitOutcome(t *testing.T) {
	fatal := func(code, msg string) error {
		return &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: msg}
	}
	errorSev := func(code string) error {
		return &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: code}
	}
	tests := []struct {
		name          string
		err           error
		want          classify.Class
		wantAmbiguous bool
	}{
		{"committed", nil, classify.None, false},
		{"commit answered ROLLBACK", errRollbackTag, classify.Permanent, false},
		{"40001 at commit is a conflict", errorSev("40001"), classify.Conflict, false},
		{"40P01 at commit is a conflict", errorSev("40P01"), classify.Conflict, false},
		{"23505 at commit (deferred constraint)", errorSev("23505"), classify.Permanent, false},
		{"57014 at commit (deferred trigger cancelled)", errorSev("57014"), classify.Timeout, false},
		{"25P03: the session died idle, before COMMIT", fatal("25P03", "terminating connection due to idle-in-transaction timeout"), classify.Timeout, false},
		{"a pooler's idle transaction timeout, before COMMIT", fatal("08P01", "idle transaction timeout"), classify.Timeout, false},
		{"08007 at commit: transaction_resolution_unknown", errorSev("08007"), classify.Ambiguous, true},
		{"40003 at commit: statement_completion_unknown", errorSev("40003"), classify.Ambiguous, true},
		{"conn closed", pgconn.ErrConnClosed, classify.Ambiguous, true},
		{"EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), classify.Ambiguous, true},
		{"our commit timeout", fmt.Errorf("timeout: %w", context.DeadlineExceeded), classify.Ambiguous, true},
		{"FATAL 57P01 during sync-rep wait", fatal("57P01", "terminating connection due to administrator command"), classify.Ambiguous, true},
		{"ERROR 08006", errorSev("08006"), classify.Ambiguous, true},
		{"pooler killed the server connection", fatal("08P01", "query timeout"), classify.Ambiguous, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tag := pgconn.NewCommandTag("COMMIT")
			in := tt.err
			if in == errRollbackTag {
				tag, in = pgconn.NewCommandTag("ROLLBACK"), nil
			}
			class, err := commitOutcome(tag, in)
			if class != tt.want {
				t.Errorf("class = %v, want %v", class, tt.want)
			}
			if got := errors.Is(err, errs.ErrCommitUnknown); got != tt.wantAmbiguous {
				t.Errorf("errors.Is(err, ErrCommitUnknown) = %v, want %v (err %v)", got, tt.wantAmbiguous, err)
			}
			if in != nil && !errors.Is(err, in) {
				t.Errorf("err = %v lost the original %v", err, tt.err)
			}
			if tt.err == errRollbackTag && err != pgx.ErrTxCommitRollback {
				t.Errorf("err = %v, want pgx.ErrTxCommitRollback", err)
			}
		})
	}
}

// TestNothingToEnd: a transaction whose BEGIN was never sent commits and
// rolls back nothing, without touching its connection (it has none here).
func TestNothingToEnd(t *testing.T) {
	tx := &Tx{w: writer{s: &Settings{}}}
	if c, err := Commit(context.Background(), tx, nil); c != classify.None || err != nil {
		t.Errorf("Commit = %v, %v; want none, nil", c, err)
	}
	Rollback(context.Background(), tx)
}
