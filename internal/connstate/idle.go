package connstate

import (
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Ended reports whether the server has ended pgConn, an idle connection,
// since its last statement: it sent an error (at idle, only the FATAL that
// ends a session: a shutdown's 57P01, idle_session_timeout's 57P05) or
// closed the connection. A statement sent on such a connection would be
// answered by that end, after it left. Other messages an idle session may
// get (a notification of a LISTEN, a notice) do not count; under TLS, where
// the message cannot be told, whatever waits counts. Ended costs one system
// call and does not wait; it is false where the socket cannot be peeked at.
func (s *State) Ended(pgConn *pgconn.PgConn) bool { return s.idle.ended(pgConn.Conn()) }

// ended is [State.Ended] of the connection c.
func (d *idle) ended(c net.Conn) bool {
	if !d.init {
		d.init = true
		d.raw, d.tls = rawConn(c)
		d.peek = func(fd uintptr) { d.n, d.err = peek(fd, d.buf[:]) }
	}
	if d.raw == nil {
		return false
	}
	// Control, not Read: a read of pgconn's may be under way (its
	// background reader, started by a slow write, stays blocked on an
	// idle connection) and holds the socket's read lock until the server
	// sends something. The peek takes nothing, and the socket does not
	// block.
	if err := d.raw.Control(d.peek); err != nil {
		return true // the socket is closed
	}
	switch {
	case d.err != nil:
		return !retryable(d.err)
	case d.n == 0:
		return true // the server closed the connection
	}
	return d.tls || d.buf[0] == 'E' // an ErrorResponse
}

// idle is what Ended keeps of the connection's socket, made at its first
// check so that a check allocates nothing.
type idle struct {
	init bool
	raw  syscall.RawConn // nil: the socket cannot be peeked at
	tls  bool            // the socket carries TLS
	peek func(fd uintptr)
	buf  [1]byte
	n    int
	err  error
}

// rawConn is c's socket under its TLS, if any (tls), or nil if it has
// none.
func rawConn(c net.Conn) (raw syscall.RawConn, tls bool) {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c, tls = tc.NetConn(), true
	}
	sc, ok := c.(syscall.Conn)
	if !ok || !canPeek {
		return nil, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, false
	}
	return raw, tls
}
