package pgtx

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// codeTransactionTimeout is transaction_timeout (PostgreSQL 17), which
// pgerrcode does not list yet.
const codeTransactionTimeout = "25P04"

// Class is what pgtx does with an error: retry the whole transaction, back off,
// give up, or report an unknown outcome. The zero Class is the class of a nil
// error (its String is "none"): [Classify](nil) returns it, and so does a
// committed attempt's [TraceAttemptEndData].Class.
type Class int

// classNone is the zero Class, a nil error's.
const classNone Class = 0

// The error classes of pgtx.
const (
	// ClassConflict is 40001 serialization_failure and 40P01 deadlock_detected:
	// someone else committed, so the whole transaction runs again after a short
	// jittered pause, up to [RetryConfig].MaxRetries times.
	ClassConflict Class = iota + 1
	// ClassOverload is the server (or a pooler in front of it) shedding load:
	// 53300 too_many_connections, 57P03 cannot_connect_now, the poolers'
	// admission errors and the server's overload errors a pooler relays.
	// Retried with exponential backoff and full jitter, at most
	// [RetryConfig].MaxAdaptiveRetries times.
	ClassOverload
	// ClassUnavailable is a connection that could not be made to a server
	// that may come back: refused, or reset or closed while connecting (a
	// server restarting, a pooler not admitting or unable to reach it), or
	// no read-write host among those named while a standby is promoted. A
	// failover or a restart takes seconds, so it is retried until the
	// context's deadline, or [RetryConfig].UnavailableTimeout after the
	// call's first such error when that comes first, paced by the Client
	// Backpressure specification's backoff and the retry budget; neither
	// MaxRetries nor MaxAdaptiveRetries caps these retries, and they do not
	// make MaxAdaptiveRetries the cap of the call's other retries, as an
	// overload does.
	ClassUnavailable
	// ClassConnectionLost is a connection that died before COMMIT was sent
	// (08xxx, 57P01, 57P02, reset, EOF, pgconn.ErrConnClosed). Nothing
	// was committed, so the transaction runs again on a fresh connection.
	ClassConnectionLost
	// ClassAmbiguous is a connection lost while COMMIT was in flight: the
	// transaction may or may not have committed. Never retried; the error
	// matches [ErrCommitUnknown].
	ClassAmbiguous
	// ClassTimeout is 57014 query_canceled, 25P03, 25P04, a context error,
	// [ErrAcquireTimeout] or [ErrQueueFull]. Never retried: what took too long
	// takes too long again, and a full pool queue is the pool shedding load.
	ClassTimeout
	// ClassPermanent is everything else: constraint, syntax and data errors,
	// authentication failures, a database, host or socket that does not
	// exist, the caller's own errors and errors wrapped by [NonRetryable].
	ClassPermanent
)

// String returns the lower-case name of the class, as used in traces and
// metrics.
func (c Class) String() string {
	switch c {
	case classNone:
		return "none"
	case ClassConflict:
		return "conflict"
	case ClassOverload:
		return "overload"
	case ClassUnavailable:
		return "unavailable"
	case ClassConnectionLost:
		return "connection_lost"
	case ClassAmbiguous:
		return "ambiguous"
	case ClassTimeout:
		return "timeout"
	case ClassPermanent:
		return "permanent"
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// Retryable reports whether pgtx runs a transaction again after an error of
// class c.
func (c Class) Retryable() bool {
	return c == ClassConflict || c == ClassOverload || c == ClassUnavailable || c == ClassConnectionLost
}

// adaptive reports the classes paced by the Client Backpressure
// specification's backoff (BaseBackoff, MaxBackoff). Only an overload sets
// the MaxAdaptiveRetries cap that sticks; an unavailable server is retried
// until the deadline or UnavailableTimeout.
func (c Class) adaptive() bool { return c == ClassOverload || c == ClassUnavailable }

// Classify returns the class of err as [Transaction] sees it outside of COMMIT.
// It looks through wrapped and joined errors. The precedence is: [NonRetryable]
// and [ErrCommitUnknown] first (they are explicit decisions), then context
// errors and [ErrAcquireTimeout] (the caller's budget is spent), then a
// connect that found a host read-only or a standby where
// target_session_attrs asked for writes (unavailable: a failover under way,
// whatever the other hosts answered), then the SQLSTATE of the first PgError (with the texts of the poolers that send
// their own errors under a generic code), then network-level failures — no
// such host or socket file (permanent), a connection that could not be made
// (unavailable), one that broke (connection lost) — then permanent.
func Classify(err error) Class {
	if err == nil {
		return classNone
	}
	if errors.Is(err, errNonRetryableMarker) {
		return ClassPermanent
	}
	if errors.Is(err, ErrCommitUnknown) {
		return ClassAmbiguous
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrAcquireTimeout) ||
		errors.Is(err, ErrQueueFull) {
		return ClassTimeout
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) && (errors.Is(err, pgconn.ErrReadOnlyConnection) || errors.Is(err, pgconn.ErrStandbyConnection)) {
		// target_session_attrs asked for a server that takes writes and a
		// host was read-only or a standby, the others down or refusing
		// (57P03 while one shuts down): a primary being demoted, a standby
		// not yet promoted, a failover under way.
		return ClassUnavailable
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return classifyPgError(pgErr)
	}
	if isUnfixable(err) {
		return ClassPermanent
	}
	if errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &connectErr) && isNetworkError(connectErr.Unwrap())) {
		// No connection could be made (refused, or reset or closed while
		// connecting) and no server error says why: the server is
		// restarting or down, or a pooler in front of it is not admitting.
		// Ride it out with the overload backoff instead of hammering it.
		return ClassUnavailable
	}
	if errors.As(err, &connectErr) {
		// A connect that failed for a reason of the client's own (TLS
		// configuration, say): the next attempt fails the same way.
		return ClassPermanent
	}
	if isNetworkError(err) {
		return ClassConnectionLost
	}
	return ClassPermanent
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

// classifyPgError maps one server error to its class.
func classifyPgError(e *pgconn.PgError) Class {
	switch e.Code {
	case pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected:
		return ClassConflict
	case pgerrcode.TooManyConnections, pgerrcode.CannotConnectNow:
		return ClassOverload
	case pgerrcode.ConnectionException, pgerrcode.ConnectionDoesNotExist, pgerrcode.ConnectionFailure,
		pgerrcode.SQLClientUnableToEstablishSQLConnection, pgerrcode.SQLServerRejectedEstablishmentOfSQLConnection,
		pgerrcode.AdminShutdown, pgerrcode.CrashShutdown:
		return ClassConnectionLost
	case pgerrcode.TransactionResolutionUnknown, pgerrcode.StatementCompletionUnknown:
		// Outside COMMIT these say the server could not tell whether the
		// statement or transaction took effect; the session is gone or
		// about to be. At COMMIT, commit classifies them as ambiguous.
		return ClassConnectionLost
	case pgerrcode.QueryCanceled, pgerrcode.IdleInTransactionSessionTimeout, codeTransactionTimeout:
		return ClassTimeout
	case pgerrcode.InvalidAuthorizationSpecification, pgerrcode.InvalidPassword, pgerrcode.InvalidCatalogName:
		return ClassPermanent // no retry logs in or finds the database
	}
	if c, ok := classifyPoolerError(e); ok {
		return c
	}
	return ClassPermanent
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
