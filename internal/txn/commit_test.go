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
		closed        bool // the connection closed after the answer
		want          classify.Class
		wantAmbiguous bool
	}{
		{"committed", nil, false, classify.None, false},
		{"commit answered ROLLBACK", errRollbackTag, false, classify.Permanent, false},
		{"40001 at commit is a conflict", errorSev("40001"), false, classify.Conflict, false},
		{"40P01 at commit is a conflict", errorSev("40P01"), false, classify.Conflict, false},
		{"23505 at commit (deferred constraint)", errorSev("23505"), false, classify.Permanent, false},
		{"57014 at commit (deferred trigger cancelled)", errorSev("57014"), false, classify.Timeout, false},
		{"25P03: the session died idle, before COMMIT", fatal("25P03", "terminating connection due to idle-in-transaction timeout"), false, classify.Timeout, false},
		{"a pooler's idle transaction timeout, before COMMIT", fatal("08P01", "idle transaction timeout"), false, classify.Timeout, false},
		{"08007 at commit: transaction_resolution_unknown", errorSev("08007"), false, classify.Ambiguous, true},
		{"40003 at commit: statement_completion_unknown", errorSev("40003"), false, classify.Ambiguous, true},
		{"conn closed", pgconn.ErrConnClosed, false, classify.Ambiguous, true},
		{"EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), false, classify.Ambiguous, true},
		{"our commit timeout", fmt.Errorf("timeout: %w", context.DeadlineExceeded), false, classify.Ambiguous, true},
		{"FATAL 57P01 during sync-rep wait", fatal("57P01", "terminating connection due to administrator command"), false, classify.Ambiguous, true},
		{"ERROR 08006", errorSev("08006"), false, classify.Ambiguous, true},
		{"pooler killed the server connection", fatal("08P01", "query timeout"), false, classify.Ambiguous, true},
		// Pgpool-II closes the session after an ERROR of its own (XX000):
		// COMMIT may have been forwarded first.
		{"a pooler's ERROR, the session closed after it", errorSev("XX000"), true, classify.Ambiguous, true},
		{"40001, the session closed after it", errorSev("40001"), true, classify.Ambiguous, true},
		{"25P03, the session closed after it: died idle, before COMMIT", fatal("25P03", "terminating connection due to idle-in-transaction timeout"), true, classify.Timeout, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tag := pgconn.NewCommandTag("COMMIT")
			in := tt.err
			if in == errRollbackTag {
				tag, in = pgconn.NewCommandTag("ROLLBACK"), nil
			}
			class, err := commitOutcome(tag, in, tt.closed)
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
