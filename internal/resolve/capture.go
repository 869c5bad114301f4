package resolve

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/classify"
)

// Conn is what a connection of a resolving pool knows for resolving its
// COMMITs, captured before its first transaction ([Conn.Prepare]).
type Conn struct {
	// Asked: Prepare has captured what follows (Capable false when the
	// server cannot be asked).
	Asked bool
	// Capable: the server can be asked (PostgreSQL 13 or later); the rest
	// is valid only then.
	Capable bool
	// Standby: the server was in recovery when the capture was made
	// (for PostgreSQL 13, which does not report in_hot_standby).
	Standby bool
	// System is the server's system identifier, shared by a primary and
	// its standbys.
	System int64
	// Run and Flushed are the server's run and its flushed WAL position
	// when the capture was made (Run.Timeline is 0 when made on a
	// standby).
	Run     Run
	Flushed int64
	// BackendStart is the session's backend start (unix microseconds; 0
	// when not visible): with the pid, the backend's identity.
	BackendStart int64
	// Emit: the session may write the logical message that marks a
	// transaction's WAL ([ID].LSN): pg_logical_emit_message, which any
	// role may call unless an administrator revoked it.
	Emit bool
	// Direct: the session's backend pid is the connection's, so the
	// backend lives as long as the connection and every transaction on it
	// runs in the run captured here. Behind a pooler the server connection
	// can change under the client's, and each transaction captures its own
	// (with its id: [RunSQL]).
	Direct bool
}

// Prepare captures the server's identity for resolution, before the
// connection's first transaction, and sets Asked. A server that cannot be
// asked leaves the connection without (its lost COMMITs are
// ErrCommitUnknown). A connection that failed is an error, and so is a
// cancelled question (the caller's context ended, or statement_timeout),
// which leaves Asked false, to ask again at the next transaction.
func (r *Conn) Prepare(ctx context.Context, conn *pgx.Conn) error {
	if !MayResolve(conn.PgConn().ParameterStatus) {
		r.Asked = true
		return nil
	}
	var ok bool
	var pid uint32
	err := conn.QueryRow(ctx, systemSQL, pgx.QueryExecModeSimpleProtocol).Scan(&r.System, &r.Standby, &ok, &pid,
		&r.Run.Timeline, &r.Run.Start, &r.Run.Epoch, &r.Flushed, &r.BackendStart, &r.Emit)
	var pgErr *pgconn.PgError
	switch {
	case err == nil && ok:
		r.Direct = pid == conn.PgConn().PID()
		r.Capable = true
	case err == nil:
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.QueryCanceled:
		return fmt.Errorf("pgtx: capture the server's identity: %w", err)
	case errors.As(err, &pgErr) && classify.PgError(pgErr) != classify.ConnectionLost && !conn.IsClosed():
		// Not PostgreSQL's functions: nothing to ask.
	default:
		return fmt.Errorf("pgtx: capture the server's identity: %w", err)
	}
	r.Asked = true
	return nil
}

// MayResolve reports from what the server said at startup (param gives a
// parameter's value, "" when not sent) whether it may
// have pg_xact_status: PostgreSQL 13 or later, and neither CockroachDB
// (which reports crdb_version) nor YugabyteDB (a "-YB-" version), whose
// transaction ids do not mean what PostgreSQL's do.
func MayResolve(param func(string) string) bool {
	v := param("server_version")
	if param("crdb_version") != "" || strings.Contains(v, "-YB-") {
		return false
	}
	digits := 0
	for digits < len(v) && v[digits] >= '0' && v[digits] <= '9' {
		digits++
	}
	major, err := strconv.Atoi(v[:digits]) // "15.8 (Debian ...)", "17beta1"
	return err == nil && major >= 13
}

// InRecovery reports whether the connection's server is in recovery now,
// as far as the client knows: in_hot_standby (reported on every change by
// PostgreSQL 14 and later), else what was seen when it was captured.
func (r *Conn) InRecovery(pgConn *pgconn.PgConn) bool {
	if v := pgConn.ParameterStatus("in_hot_standby"); v != "" {
		return v == "on"
	}
	return r.Standby
}

// StillInRecovery reports that a server in recovery when a transaction
// began was still in recovery at its last answer: a transaction begun in
// recovery is read-only for its whole life and, while the server stays in
// recovery, can send no notification either.
func StillInRecovery(pgConn *pgconn.PgConn) bool {
	v := pgConn.ParameterStatus("in_hot_standby")
	return v == "" || v == "on"
}

// ParseRun parses the columns of [RunSQL], as text.
func ParseRun(v [][]byte) (run Run, flushed int64) {
	tl, _ := strconv.ParseInt(string(v[0]), 10, 32)
	run.Timeline = int32(tl)
	run.Start, _ = strconv.ParseInt(string(v[1]), 10, 64)
	run.Epoch, _ = strconv.ParseInt(string(v[2]), 10, 64)
	flushed, _ = strconv.ParseInt(string(v[3]), 10, 64)
	return run, flushed
}

// ParseUint parses a decimal text value, as the id reads return it.
func ParseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}
