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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/classify"
)

var errCaller = errors.New("insufficient funds")

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"nil", nil, classNone},
		{"40001", pgErr("40001"), ClassConflict},
		{"40P01", pgErr("40P01"), ClassConflict},
		{"53300", pgErr("53300"), ClassOverload},
		{"57P03", pgErr("57P03"), ClassOverload},
		{"08000", pgErr("08000"), ClassConnectionLost},
		{"08003", pgErr("08003"), ClassConnectionLost},
		{"08006", pgErr("08006"), ClassConnectionLost},
		{"57P01 admin shutdown", pgErr("57P01"), ClassConnectionLost},
		{"57P02 crash shutdown", pgErr("57P02"), ClassConnectionLost},
		{"57014 query canceled", pgErr("57014"), ClassTimeout},
		{"25P03 idle in transaction timeout", pgErr("25P03"), ClassTimeout},
		{"25P04 transaction timeout", pgErr("25P04"), ClassTimeout},
		{"23505 unique", pgErr("23505"), ClassPermanent},
		{"42601 syntax", pgErr("42601"), ClassPermanent},
		{"22012 division by zero", pgErr("22012"), ClassPermanent},
		{"40002 integrity constraint at commit", pgErr("40002"), ClassPermanent},
		{"08P01 plain protocol violation", pgErr("08P01"), ClassPermanent},
		{"pgbouncer max_client_conn", &pgconn.PgError{Code: "08P01", Message: "no more connections allowed (max_client_conn)"}, ClassOverload},
		{"pgbouncer query_wait_timeout", &pgconn.PgError{Code: "08P01", Message: "query_wait_timeout"}, ClassOverload},
		{"pgbouncer without code", &pgconn.PgError{Message: "no more connections allowed (max_client_conn)"}, ClassOverload},
		{"pgbouncer db client limit", &pgconn.PgError{Code: "08P01", Message: "client connections exceeded (max_db_client_connections)"}, ClassOverload},
		{"pgbouncer fast fail", &pgconn.PgError{Code: "08P01", Message: "server login has been failing, cached error: connect failed (server_login_retry)"}, ClassUnavailable},
		{"pgbouncer old fast fail", &pgconn.PgError{Code: "08P01", Message: "pgbouncer cannot connect to server"}, ClassUnavailable},
		{"pgbouncer shutting down", &pgconn.PgError{Code: "08P01", Message: "server shutting down"}, ClassUnavailable},
		{"pgbouncer query_timeout", &pgconn.PgError{Code: "08P01", Message: "query_timeout"}, ClassTimeout},
		{"pgbouncer query timeout", &pgconn.PgError{Code: "08P01", Message: "query timeout"}, ClassTimeout},
		{"pgbouncer server crashed", &pgconn.PgError{Code: "08P01", Message: "server conn crashed?"}, ClassConnectionLost},
		{"supavisor max clients", &pgconn.PgError{Code: "XX000", Message: "(EMAXCONN) max client connections reached, limit: 200"}, ClassOverload},
		{"supavisor checkout timeout", &pgconn.PgError{Code: "XX000", Message: "(ECHECKOUTTIMEOUT) Pool checkout timeout. Request was dropped after 5000ms"}, ClassOverload},
		{"pgcat checkout", &pgconn.PgError{Code: "58000", Message: "could not get connection from the pool - AllServersDown"}, ClassOverload},
		{"pooler text under another code is not the pooler", &pgconn.PgError{Code: "P0001", Message: "query_wait_timeout"}, ClassPermanent},
		{"other XX000", &pgconn.PgError{Code: "XX000", Message: "cache lookup failed"}, ClassPermanent},
		{"conn closed", pgconn.ErrConnClosed, ClassConnectionLost},
		{"EOF", io.EOF, ClassConnectionLost},
		{"unexpected EOF", io.ErrUnexpectedEOF, ClassConnectionLost},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, ClassConnectionLost},
		{"refused: the server is restarting", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, ClassUnavailable},
		{"broken pipe", fmt.Errorf("write: %w", syscall.EPIPE), ClassConnectionLost},
		{"context canceled", context.Canceled, ClassTimeout},
		{"deadline", context.DeadlineExceeded, ClassTimeout},
		{"acquire timeout", &acquireTimeoutError{}, ClassTimeout},
		{"caller error", errCaller, ClassPermanent},
		{"tx closed", pgx.ErrTxClosed, ClassPermanent},
		{"commit rollback", pgx.ErrTxCommitRollback, ClassPermanent},
		{"commit unknown", &commitUnknownError{Err: io.EOF}, ClassAmbiguous},
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
		{&commitUnknownError{Err: pgErr("08006")}, "08006"},
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
