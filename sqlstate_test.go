package pgtx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/classify"
)

var errCaller = errors.New("insufficient funds")

// TestClassify: Classify's own decisions (NonRetryable, ErrCommitUnknown,
// the caller's and the pool's timeouts first, through wrapping and
// joining) and one row of each class it takes from internal/classify, whose
// table has every SQLSTATE, pooler text and network error.
func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"nil", nil, classNone},
		{"40001", pgErr("40001"), ClassConflict},
		{"53300", pgErr("53300"), ClassOverload},
		{"08006", pgErr("08006"), ClassConnectionLost},
		{"57014 query canceled", pgErr("57014"), ClassTimeout},
		{"23505 unique", pgErr("23505"), ClassPermanent},
		{"pgbouncer max_client_conn", &pgconn.PgError{Code: "08P01", Message: "no more connections allowed (max_client_conn)"}, ClassOverload},
		{"conn closed", pgconn.ErrConnClosed, ClassConnectionLost},
		{"EOF", io.EOF, ClassConnectionLost},
		{"refused: the server is restarting", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, ClassUnavailable},
		{"context canceled", context.Canceled, ClassTimeout},
		{"deadline", context.DeadlineExceeded, ClassTimeout},
		{"acquire timeout", &acquireTimeoutError{}, ClassTimeout},
		{"queue full", fmt.Errorf("call: %w", ErrQueueFull), ClassTimeout},
		{"caller error", errCaller, ClassPermanent},
		{"tx closed", pgx.ErrTxClosed, ClassPermanent},
		{"commit rollback", pgx.ErrTxCommitRollback, ClassPermanent},
		{"commit unknown", lostCommit(io.EOF), ClassAmbiguous},
		{"wrapped 40001", fmt.Errorf("withdraw: %w", pgErr("40001")), ClassConflict},
		{"twice wrapped 53300", fmt.Errorf("a: %w", fmt.Errorf("b: %w", pgErr("53300"))), ClassOverload},
		{"joined caller error and 40001", errors.Join(errCaller, pgErr("40001")), ClassConflict},
		{"joined context error and 40001: context wins", errors.Join(pgErr("40001"), context.DeadlineExceeded), ClassTimeout},
		{"joined 57014 and deadline", errors.Join(pgErr("57014"), context.DeadlineExceeded), ClassTimeout},
		{"NonRetryable 40001", NonRetryable(pgErr("40001")), ClassPermanent},
		{"wrapped NonRetryable", fmt.Errorf("x: %w", NonRetryable(pgErr("40P01"))), ClassPermanent},
		{"joined NonRetryable", errors.Join(pgErr("40001"), NonRetryable(errCaller)), ClassPermanent},
		{"pgconn timeout with deadline", fmt.Errorf("timeout: %w", context.DeadlineExceeded), ClassTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestSQLStateHelper(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errCaller, ""},
		{pgErr("40001"), "40001"},
		{fmt.Errorf("w: %w", pgErr("23505")), "23505"},
		{errors.Join(errCaller, pgErr("57014")), "57014"},
		{lostCommit(pgErr("08006")), "08006"},
	}
	for _, tt := range tests {
		if got := sqlState(tt.err); got != tt.want {
			t.Errorf("sqlState(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestClassString(t *testing.T) {
	seen := map[string]bool{}
	for c := classNone; c <= ClassPermanent; c++ {
		s := c.String()
		if s == "" || s == "unknown" || seen[s] {
			t.Errorf("Class(%d).String() = %q", int(c), s)
		}
		seen[s] = true
	}
	if Class(99).String() != "Class(99)" {
		t.Errorf("Class(99).String() = %q", Class(99).String())
	}
}

// TestClassNumbering: pgtx.Class converts from the internal classes, so
// their values must agree.
func TestClassNumbering(t *testing.T) {
	pairs := []struct {
		root     Class
		internal classify.Class
	}{
		{classNone, classify.None},
		{ClassConflict, classify.Conflict},
		{ClassOverload, classify.Overload},
		{ClassUnavailable, classify.Unavailable},
		{ClassConnectionLost, classify.ConnectionLost},
		{ClassAmbiguous, classify.Ambiguous},
		{ClassTimeout, classify.Timeout},
		{ClassPermanent, classify.Permanent},
	}
	for _, p := range pairs {
		if int(p.root) != int(p.internal) {
			t.Errorf("%v is %d, the internal class %d", p.root, int(p.root), int(p.internal))
		}
	}
}

func TestIsUniqueViolation(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{pgErr(pgerrcode.UniqueViolation), true},
		{pgErr(pgerrcode.ExclusionViolation), true},
		{pgErr(pgerrcode.ForeignKeyViolation), false},
		{NonRetryable(pgErr(pgerrcode.UniqueViolation)), false},
		{errCallerOwn, false},
	} {
		if got := isUniqueViolation(tt.err); got != tt.want {
			t.Errorf("isUniqueViolation(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
