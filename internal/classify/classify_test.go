package classify

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
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
		{"57P03", pgErr("57P03"), Unavailable},
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
		{"relayed 57P03 text", &pgconn.PgError{Code: "08P01", Message: "the database system is in recovery mode"}, Unavailable},
		{"pgbouncer login failing", &pgconn.PgError{Code: "08P01", Message: "server login has been failing, cached error: x"}, Unavailable},
		{"pgbouncer query_timeout", &pgconn.PgError{Code: "08P01", Message: "query_timeout"}, Timeout},
		{"pgbouncer database removed", &pgconn.PgError{Code: "08P01", Message: "database removed"}, ConnectionLost},
		{"supavisor", &pgconn.PgError{Code: "XX000", Message: "(ECHECKOUTTIMEOUT) Pool checkout timeout"}, Overload},
		{"pgcat", &pgconn.PgError{Code: "58000", Message: "could not get connection from the pool - AllServersDown"}, Overload},
		{"pgpool a backend it cannot connect to", &pgconn.PgError{Severity: "FATAL", Code: "XX000", Message: "failed to create a backend 0 connection"}, Unavailable},
		{"pgpool every node down", &pgconn.PgError{Severity: "ERROR", Code: "XX000", Message: "all backend nodes are down, pgpool requires at least one valid node"}, Unavailable},
		{"pgpool a node's connection broke", &pgconn.PgError{Severity: "ERROR", Code: "XX000", Message: "unable to read data from DB node 0"}, ConnectionLost},
		{"pgpool no kind from a backend", &pgconn.PgError{Severity: "FATAL", Code: "XX000", Message: "failed to read kind from backend 0"}, ConnectionLost},
		{"pgpool kinds that differ", &pgconn.PgError{Severity: "ERROR", Code: "XX000", Message: "unable to read message kind"}, ConnectionLost},
		{"pgpool its own query failed", &pgconn.PgError{Severity: "FATAL", Code: "XX000", Message: "Backend throw an error message"}, ConnectionLost},
		{"pgpool a backend's socket", &pgconn.PgError{Severity: "FATAL", Code: "XX000", Message: "unable to read from backend socket"}, ConnectionLost},
		{"pgpool a write to a backend", &pgconn.PgError{Severity: "ERROR", Code: "XX000", Message: "unable to flush data to backend"}, ConnectionLost},
		{"pgpool a backend ended by pg_terminate_backend", &pgconn.PgError{Severity: "FATAL", Code: "XX000",
			Message: "connection to postmaster on DB node 0 was lost due to pg_terminate_backend"}, ConnectionLost},
		{"pgpool md5 authentication failed stays permanent", &pgconn.PgError{Severity: "FATAL", Code: "XX000", Message: "md5 authentication failed"}, Permanent},
		{"pgpool too many clients", &pgconn.PgError{Severity: "FATAL", Code: "53300", Message: "Sorry, too many clients already"}, Overload},
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

// TestConnectErrors: what a real connect that failed is, by why it failed:
// a server that answers 57P03 is unavailable, and so is one whose session
// is lost while it is made (a server shutting down, Pgpool-II whose
// backend connection broke); a listener that never answers (a server too
// loaded to accept) is an overload once the connect timeout passes, and a
// closed port is unavailable.
func TestConnectErrors(t *testing.T) {
	tests := []struct {
		name  string
		serve func(c net.Conn) // what the "server" does with a connection
		want  Class
	}{
		{"57P03 at startup", func(c net.Conn) {
			readStartup(c)
			b, _ := (&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P03",
				Message: "the database system is in recovery mode"}).Encode(nil)
			_, _ = c.Write(b)
		}, Unavailable},
		{"57P01 at startup", func(c net.Conn) {
			readStartup(c)
			b, _ := (&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01",
				Message: "terminating connection due to administrator command"}).Encode(nil)
			_, _ = c.Write(b)
		}, Unavailable},
		{"Pgpool-II's backend broke at startup", func(c net.Conn) {
			readStartup(c)
			b, _ := (&pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "XX000",
				Message: "unable to read data from DB node 0"}).Encode(nil)
			_, _ = c.Write(b)
		}, Unavailable},
		{"no answer within connect_timeout", func(c net.Conn) { readStartup(c); _, _ = io.Copy(io.Discard, c) }, Overload},
		{"closed at once", func(net.Conn) {}, Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := fakeServer(t, tt.serve)
			cfg, err := pgconn.ParseConfig("postgres://u@" + addr + "/db?sslmode=disable&connect_timeout=1")
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnectTimeout = 100 * time.Millisecond
			c, err := pgconn.ConnectConfig(context.Background(), cfg)
			if err == nil {
				_ = c.Close(context.Background())
				t.Fatal("connect succeeded")
			}
			if got := Err(err); got != tt.want {
				t.Errorf("Err(%v) = %d, want %d", err, got, tt.want)
			}
		})
	}
	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		_, err = pgconn.Connect(context.Background(), "postgres://u@"+addr+"/db?sslmode=disable&connect_timeout=1")
		if got := Err(err); got != Unavailable {
			t.Errorf("Err(%v) = %d, want %d", err, got, Unavailable)
		}
	})
}

// fakeServer listens on 127.0.0.1 and hands each connection to serve, then
// closes it; the listener and its goroutines end with the test.
func fakeServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				serve(c)
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// readStartup reads the client's startup message, answering 'N' to a
// request for encryption first.
func readStartup(c net.Conn) {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		if n < 8 {
			return
		}
		if _, err := io.CopyN(io.Discard, c, int64(n-8)); err != nil {
			return
		}
		if code := binary.BigEndian.Uint32(hdr[4:]); code == 80877103 || code == 80877104 {
			_, _ = c.Write([]byte{'N'}) // SSLRequest, GSSENCRequest
			continue
		}
		return
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
		{"ERROR from Pgpool-II, whose child closes the session after it", &pgconn.PgError{SeverityUnlocalized: "ERROR", Code: "XX000", Message: "unable to read data from DB node 0"}, true},
	}
	for _, tt := range tests {
		if got := EndsSession(tt.err); got != tt.want {
			t.Errorf("%s: EndsSession = %v, want %v", tt.name, got, tt.want)
		}
	}
}
