package classify

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func pgErr(code string) *pgconn.PgError { return &pgconn.PgError{Code: code} }

// TestErr covers every row of the classification by what the server and
// the network said: SQLSTATEs, the poolers' texts under their generic
// codes (and not under others), connects and broken connections.
func TestErr(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"nil", nil, None},
		{"40001", pgErr("40001"), Conflict},
		{"40P01", pgErr("40P01"), Conflict},
		{"53300", pgErr("53300"), Overload},
		{"57P03", pgErr("57P03"), Overload},
		{"08000", pgErr("08000"), ConnectionLost},
		{"08003", pgErr("08003"), ConnectionLost},
		{"08006", pgErr("08006"), ConnectionLost},
		{"08001", pgErr("08001"), ConnectionLost},
		{"08004", pgErr("08004"), ConnectionLost},
		{"57P01", pgErr("57P01"), ConnectionLost},
		{"57P02", pgErr("57P02"), ConnectionLost},
		{"08007 outside COMMIT", pgErr("08007"), ConnectionLost},
		{"40003 outside COMMIT", pgErr("40003"), ConnectionLost},
		{"57014", pgErr("57014"), Timeout},
		{"25P03", pgErr("25P03"), Timeout},
		{"25P04", pgErr("25P04"), Timeout},
		{"28000", pgErr("28000"), Permanent},
		{"28P01", pgErr("28P01"), Permanent},
		{"3D000", pgErr("3D000"), Permanent},
		{"23505", pgErr("23505"), Permanent},
		{"42601", pgErr("42601"), Permanent},
		{"22012", pgErr("22012"), Permanent},
		{"40002, an integrity constraint at COMMIT", pgErr("40002"), Permanent},
		{"XX000 from the server", &pgconn.PgError{Code: "XX000", Message: "cache lookup failed"}, Permanent},
		{"08P01 without a pooler's text", pgErr("08P01"), Permanent},
		{"pgbouncer max_client_conn", &pgconn.PgError{Code: "08P01", Message: "no more connections allowed (max_client_conn)"}, Overload},
		{"pgbouncer without a code", &pgconn.PgError{Message: "query_wait_timeout"}, Overload},
		{"relayed 53300 text", &pgconn.PgError{Code: "08P01", Message: "sorry, too many clients already"}, Overload},
		{"pgbouncer login failing", &pgconn.PgError{Code: "08P01", Message: "server login has been failing, cached error: x"}, Unavailable},
		{"pgbouncer query_timeout", &pgconn.PgError{Code: "08P01", Message: "query_timeout"}, Timeout},
		{"pgbouncer database removed", &pgconn.PgError{Code: "08P01", Message: "database removed"}, ConnectionLost},
		{"supavisor", &pgconn.PgError{Code: "XX000", Message: "(ECHECKOUTTIMEOUT) Pool checkout timeout"}, Overload},
		{"pgcat", &pgconn.PgError{Code: "58000", Message: "could not get connection from the pool - AllServersDown"}, Overload},
		{"a pooler's text under another code", &pgconn.PgError{Code: "P0001", Message: "query_wait_timeout"}, Permanent},
		{"wrapped server error", fmt.Errorf("w: %w", pgErr("40001")), Conflict},
		{"conn closed", pgconn.ErrConnClosed, ConnectionLost},
		{"EOF", io.EOF, ConnectionLost},
		{"unexpected EOF", io.ErrUnexpectedEOF, ConnectionLost},
		{"net closed", net.ErrClosed, ConnectionLost},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, ConnectionLost},
		{"broken pipe", fmt.Errorf("write: %w", syscall.EPIPE), ConnectionLost},
		{"aborted", fmt.Errorf("x: %w", syscall.ECONNABORTED), ConnectionLost},
		{"refused", refused, Unavailable},
		{"no such host", &net.DNSError{Err: "no such host", Name: "nohost", IsNotFound: true}, Permanent},
		{"no socket file", &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.ENOENT)}, Permanent},
		{"a caller's error", errors.New("insufficient funds"), Permanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Err(tt.err); got != tt.want {
				t.Errorf("Err(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

// TestPoolerMessagesMatchOnlyAsPrefixes: every pooler text is recognised
// under each generic code, only at the start of the message.
func TestPoolerMessagesMatchOnlyAsPrefixes(t *testing.T) {
	for _, m := range poolerMessages {
		for _, code := range []string{"", codeProtocolViolation, codeInternalError, codeSystemError} {
			if c, ok := pooler(&pgconn.PgError{Code: code, Message: m.prefix + " (details)"}); !ok || c != m.class {
				t.Errorf("%q under %q: %d, %v; want %d", m.prefix, code, c, ok, m.class)
			}
		}
		if _, ok := pooler(&pgconn.PgError{Code: codeProtocolViolation, Message: "said: " + m.prefix}); ok {
			t.Errorf("%q matched inside a message", m.prefix)
		}
	}
}

func TestEndedIdle(t *testing.T) {
	tests := []struct {
		err  *pgconn.PgError
		want bool
	}{
		{pgErr("25P03"), true},
		{&pgconn.PgError{Code: "08P01", Message: "idle transaction timeout"}, true},
		{&pgconn.PgError{Message: "idle transaction timeout"}, true},
		{&pgconn.PgError{Code: "XX000", Message: "idle transaction timeout"}, false},
		{pgErr("57P01"), false},
	}
	for _, tt := range tests {
		if got := EndedIdle(tt.err); got != tt.want {
			t.Errorf("EndedIdle(%s %q) = %v, want %v", tt.err.Code, tt.err.Message, got, tt.want)
		}
	}
}

func TestEndsSession(t *testing.T) {
	tests := []struct {
		name string
		err  *pgconn.PgError
		want bool
	}{
		{"FATAL", &pgconn.PgError{SeverityUnlocalized: "FATAL", Code: "XX000"}, true},
		{"PANIC", &pgconn.PgError{SeverityUnlocalized: "PANIC", Code: "XX000"}, true},
		{"FATAL, localized severity only", &pgconn.PgError{Severity: "FATAL", Code: "28000"}, true},
		{"localized FATAL, unlocalized ERROR", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "ERROR", Code: "42501"}, false},
		{"ERROR, connection lost code", &pgconn.PgError{SeverityUnlocalized: "ERROR", Code: "57P01"}, true},
		{"ERROR, query canceled", &pgconn.PgError{SeverityUnlocalized: "ERROR", Code: "57014"}, false},
		{"ERROR, insufficient privilege", &pgconn.PgError{SeverityUnlocalized: "ERROR", Code: "42501"}, false},
	}
	for _, tt := range tests {
		if got := EndsSession(tt.err); got != tt.want {
			t.Errorf("%s: EndsSession = %v, want %v", tt.name, got, tt.want)
		}
	}
}
