package classify

import (
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// Class is what pgtx does with an error. Its values are those of pgtx.Class,
// which converts from it.
type Class int

// The classes, numbered as pgtx's.
const (
	None Class = iota
	Conflict
	Overload
	Unavailable
	ConnectionLost
	Ambiguous
	Timeout
	Permanent
)

// codeTransactionTimeout is transaction_timeout (PostgreSQL 17), which
// pgerrcode does not list yet.
const codeTransactionTimeout = "25P04"

// Err returns the class of err by what the server and the network said:
// a connect that found a host read-only or a standby where
// target_session_attrs asked for writes (unavailable: a failover under
// way, whatever the other hosts answered), then the SQLSTATE of the first
// PgError (with the texts of the poolers that send their own errors under
// a generic code; a session lost while connecting is unavailable), then
// network-level failures — no such host or socket file (permanent), a
// connection that could not be made (unavailable), one that broke
// (connection lost), a connect that timed out (overload) — then permanent.
// pgtx's own decisions (its sentinels, a context error) come before it, in
// pgtx.Classify. A nil err is None.
func Err(err error) Class {
	if err == nil {
		return None
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) && (errors.Is(err, pgconn.ErrReadOnlyConnection) || errors.Is(err, pgconn.ErrStandbyConnection)) {
		// target_session_attrs asked for a server that takes writes and a
		// host was read-only or a standby, the others down or refusing
		// (57P03 while one shuts down): a primary being demoted, a standby
		// not yet promoted, a failover under way.
		return Unavailable
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		c := PgError(pgErr)
		if c == ConnectionLost && errors.As(err, &connectErr) {
			// A session lost while it was being made (a server shutting
			// down, a pooler whose server connection broke): no connection
			// could be made, to a server that may come back.
			return Unavailable
		}
		return c
	}
	if isUnfixable(err) {
		return Permanent
	}
	if errors.As(err, &connectErr) && pgconn.Timeout(connectErr.Unwrap()) {
		// A connect that timed out may have met a server too loaded to
		// accept (a connection storm), which a server that is down cannot
		// be told apart from: overload, capped and budgeted.
		return Overload
	}
	if errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &connectErr) && isNetworkError(connectErr.Unwrap())) {
		// No connection could be made (refused, or reset or closed while
		// connecting) and no server error says why: the server is
		// restarting or down, or a pooler in front of it is not admitting.
		// Ride it out with the overload backoff instead of hammering it.
		return Unavailable
	}
	if errors.As(err, &connectErr) {
		// A connect that failed for a reason of the client's own (TLS
		// configuration, say): the next attempt fails the same way.
		return Permanent
	}
	if isNetworkError(err) {
		return ConnectionLost
	}
	return Permanent
}

// isUnfixable reports the network errors no retry can fix: a host name
// that does not resolve and a Unix socket file that does not exist (no
// server was ever started there, or DATABASE_URL is missing).
func isUnfixable(err error) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Net == "unix" && errors.Is(err, syscall.ENOENT)
}

// PgError returns the class of one server error: its SQLSTATE, or for
// the generic codes poolers use, their own texts.
func PgError(e *pgconn.PgError) Class {
	switch e.Code {
	case pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected:
		return Conflict
	case pgerrcode.TooManyConnections:
		return Overload
	case pgerrcode.CannotConnectNow:
		// The server is starting up, in crash recovery, shutting down or
		// not yet accepting connections: its lifecycle, not its load. It
		// comes back within seconds, as a server that refuses does.
		return Unavailable
	case pgerrcode.ConnectionException, pgerrcode.ConnectionDoesNotExist, pgerrcode.ConnectionFailure,
		pgerrcode.SQLClientUnableToEstablishSQLConnection, pgerrcode.SQLServerRejectedEstablishmentOfSQLConnection,
		pgerrcode.AdminShutdown, pgerrcode.CrashShutdown:
		return ConnectionLost
	case pgerrcode.TransactionResolutionUnknown, pgerrcode.StatementCompletionUnknown:
		// Outside COMMIT these say the server could not tell whether the
		// statement or transaction took effect; the session is gone or
		// about to be. At COMMIT, the commit path takes them as ambiguous.
		return ConnectionLost
	case pgerrcode.QueryCanceled, pgerrcode.IdleInTransactionSessionTimeout, codeTransactionTimeout:
		return Timeout
	case pgerrcode.InvalidAuthorizationSpecification, pgerrcode.InvalidPassword, pgerrcode.InvalidCatalogName:
		return Permanent // no retry logs in or finds the database
	}
	if c, ok := pooler(e); ok {
		return c
	}
	return Permanent
}

// EndsSession reports a server error that ended the session (FATAL or
// PANIC, or a connection-lost code): at COMMIT its outcome is unknown, and
// after it the connection can run nothing more.
func EndsSession(e *pgconn.PgError) bool {
	switch e.SeverityUnlocalized {
	case "FATAL", "PANIC":
		return true
	case "":
		if e.Severity == "FATAL" || e.Severity == "PANIC" {
			return true
		}
	}
	return PgError(e) == ConnectionLost
}

// isNetworkError reports network-level failures: the connection is gone or
// could not be made, and no server error says why.
func isNetworkError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr)
}
