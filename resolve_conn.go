package pgtx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// timelineSQL is the server's current timeline: the first eight hex digits
// of the name of the WAL file it writes. 0 on a server in recovery, which
// writes none (and where pg_walfile_name fails).
const timelineSQL = `case when pg_is_in_recovery() then 0
		else ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::int end`

// systemSQL captures, when a connection is made, what a resolution needs to
// know of its server: the system identifier (shared by a primary and its
// standbys), whether it is in recovery, its timeline (a promoted standby
// starts a new one), and whether it has the functions resolution uses.
const systemSQL = `select (select system_identifier from pg_control_system()), pg_is_in_recovery(), ` + timelineSQL + `,
	to_regproc('pg_catalog.pg_xact_status') is not null and to_regproc('pg_catalog.pg_current_xact_id') is not null`

// askSQL asks what became of a transaction ($1, an xid8) on a server that
// must be the system ($2) and timeline ($3) it ran on: elsewhere the id may
// belong to another transaction, and the status column is NULL. It also
// reports the state of the backend that runs it, if one still does: the
// backend whose transaction id is $4 (the id's low 32 bits, as
// pg_stat_activity shows it; no two running transactions share it), which
// is provably ours. While the transaction is in progress, it ends that
// backend when $5 says so: 2, at once; 1, only if it is still idle in the
// transaction since the same state change ($6, unix microseconds), so it
// has received nothing since it was last seen. Once the backend is gone the
// status is definitive: committed if COMMIT had written its record, aborted
// otherwise.
const askSQL = `with s as (
	select c.system_identifier as sys, ` + timelineSQL + ` as tl from pg_control_system() c
), x as (
	select sys, tl, case when sys = $2::text::int8 and tl = $3::text::int4 then pg_xact_status($1::text::xid8) end as status from s
), b as (
	select pid, state, round(extract(epoch from state_change) * 1000000)::int8 as changed
	from pg_stat_activity where backend_xid = $4::text::xid
)
select x.sys, x.tl, x.status, coalesce(b.state, ''), coalesce(b.changed, 0),
	case when x.status = 'in progress' and b.pid is not null and ($5::text::int4 = 2
		or ($5::text::int4 = 1 and b.state like 'idle in transaction%' and b.changed = $6::text::int8))
	then pg_terminate_backend(b.pid) else false end
from x left join b on true`

// askShare bounds one question of a resolution to this fraction of
// ResolveTimeout, so that a connection that hangs does not take the whole
// of it, while a slow network still leaves each question time to connect.
const askShare = 4

// connResolve is what a connection of a resolving pool knows for resolving
// its COMMITs, captured when it is made.
type connResolve struct {
	// capable: the server can be asked (PostgreSQL 13 or later); the rest
	// is valid only then.
	capable bool
	// standby: the server was in recovery when the connection was made
	// (for PostgreSQL 13, which does not report in_hot_standby).
	standby  bool
	system   int64
	timeline int32 // 0 when made on a standby
	// tx is pgx's transaction handle for this connection. pgtx sends BEGIN
	// itself (to read the id it captures in the same round trip) and COMMIT
	// and ROLLBACK too; fn gets this handle, which pgx never closes, so its
	// statements, savepoints and large objects work as on any pgx.Tx.
	tx pgx.Tx
}

// prepare captures the server's identity for resolution. A server that
// cannot be asked leaves the connection without (its lost COMMITs are
// ErrCommitUnknown); only a connection that failed is an error.
func (r *connResolve) prepare(ctx context.Context, conn *pgx.Conn) error {
	if !mayResolve(conn.PgConn().ParameterStatus) {
		return nil
	}
	var ok bool
	err := conn.QueryRow(ctx, systemSQL, pgx.QueryExecModeSimpleProtocol).Scan(&r.system, &r.standby, &r.timeline, &ok)
	var pgErr *pgconn.PgError
	switch {
	case err == nil && !ok:
		return nil
	case err == nil:
	case errors.As(err, &pgErr) && !endsSession(pgErr) && !conn.IsClosed():
		return nil // not PostgreSQL's functions: nothing to ask
	default:
		return fmt.Errorf("pgtx: capture the server's identity: %w", err)
	}
	// An empty query: pgx's transaction handle, without a transaction.
	if r.tx, err = conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: ";"}); err != nil {
		return fmt.Errorf("pgtx: prepare the transaction handle: %w", err)
	}
	r.capable = true
	return nil
}

// mayResolve reports from what the server said at startup (param gives a
// parameter's value, "" when not sent) whether it may
// have pg_xact_status: PostgreSQL 13 or later, and neither CockroachDB
// (which reports crdb_version) nor YugabyteDB (a "-YB-" version), whose
// transaction ids do not mean what PostgreSQL's do.
func mayResolve(param func(string) string) bool {
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

// inRecovery reports whether the connection's server is in recovery now,
// as far as the client knows: in_hot_standby (reported on every change by
// PostgreSQL 14 and later), else what was seen when it was made.
func (r *connResolve) inRecovery(pgConn *pgconn.PgConn) bool {
	if v := pgConn.ParameterStatus("in_hot_standby"); v != "" {
		return v == "on"
	}
	return r.standby
}

// stillInRecovery reports that a server in recovery when a transaction
// began was still in recovery at its last answer: a transaction begun in
// recovery is read-only for its whole life and, while the server stays in
// recovery, can send no notification either.
func stillInRecovery(pgConn *pgconn.PgConn) bool {
	v := pgConn.ParameterStatus("in_hot_standby")
	return v == "" || v == "on"
}

// resolver asks what became of transactions, on connections that the main
// pool's exhaustion cannot block: the cancel pool's (CancelModePool), or a
// connection of its own made for the question.
type resolver struct {
	timeout time.Duration   // ResolveTimeout
	pool    *pgxpool.Pool   // the cancel pool; nil: connect directly
	direct  *pgx.ConnConfig // the main pool's server, without pgtx's hooks
	// beforeConnect is the caller's pgxpool BeforeConnect, run on a copy of
	// direct before each connect, as the main pool runs it.
	beforeConnect func(context.Context, *pgx.ConnConfig) error
	// cannotTerminate is set when the server refuses to end a backend (the
	// role may not), so later questions do not fail on it.
	cannotTerminate atomic.Bool
}

// newResolver builds the resolver of a pool: over cancelPool when there is
// one, else connecting with the caller's connection config.
func newResolver(cfg *Config, cancelPool *pgxpool.Pool) *resolver {
	timeout := durDefault(cfg.ResolveTimeout, defaultResolveTimeout)
	if cancelPool != nil {
		return &resolver{timeout: timeout, pool: cancelPool}
	}
	cc := cfg.ConnConfig.Copy() // the caller's, before pgtx installed its handler
	cc.Tracer = nil
	cc.BuildContextWatcherHandler = func(pgConn *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pgConn.Conn()}
	}
	return &resolver{timeout: timeout, direct: cc, beforeConnect: cfg.BeforeConnect}
}

// answer is what one question found.
type answer struct {
	status xactStatus
	// state and changed are the backend's state and the time of its last
	// change (unix microseconds), while it runs the transaction.
	state   string
	changed int64
	// terminated: the question ended the backend.
	terminated bool
	// err kept the question from an answer.
	err error
}

// Whether a question ends the backend of a transaction in progress.
const (
	keepBackend    = 0
	endIfStillIdle = 1
	endBackend     = 2
)

// ask asks once; end says whether to end the backend, and since when
// (changed) it must have been idle for endIfStillIdle.
func (r *resolver) ask(ctx context.Context, id txID, end int, changed int64) answer {
	actx, cancel := context.WithTimeout(ctx, r.timeout/askShare)
	defer cancel()
	conn, release, err := r.conn(actx)
	if err != nil {
		return answer{err: err}
	}
	defer release()
	if r.cannotTerminate.Load() {
		end = keepBackend
	}
	var sys int64
	var tl int32
	var status *string
	var a answer
	err = conn.QueryRow(actx, askSQL, pgx.QueryExecModeExec,
		xidText(id.xid), strconv.FormatInt(id.system, 10), strconv.FormatInt(int64(id.timeline), 10),
		strconv.FormatUint(id.xid&0xffffffff, 10), strconv.Itoa(end), strconv.FormatInt(changed, 10),
	).Scan(&sys, &tl, &status, &a.state, &a.changed, &a.terminated)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		// Not allowed to end the backend: wait for it to end instead.
		r.cannotTerminate.Store(true)
		return answer{err: err}
	case errors.As(err, &pgErr) && pgErr.Code == "22023":
		// "Transaction ID is in the future": this server never gave it.
		return answer{status: statusForgotten, err: err}
	default:
		return answer{err: err}
	}
	switch {
	case tl == 0:
		// A server in recovery cannot tell; the primary may come back.
		a.err = errors.New("pgtx: the server asked is in recovery")
	case sys != id.system || tl != id.timeline:
		a.status = statusElsewhere
	case status == nil:
		a.status = statusForgotten
	case *status == "committed":
		a.status = statusCommitted
	case *status == "aborted":
		a.status = statusAborted
	default:
		a.status = statusInProgress
	}
	return a
}

// conn returns a connection to ask on and its release.
func (r *resolver) conn(ctx context.Context) (*pgx.Conn, func(), error) {
	if r.pool != nil {
		c, err := r.pool.Acquire(ctx)
		if err != nil {
			return nil, nil, err
		}
		return c.Conn(), c.Release, nil
	}
	cc := r.direct
	if r.beforeConnect != nil {
		cc = r.direct.Copy()
		if err := r.beforeConnect(ctx, cc); err != nil {
			return nil, nil, err
		}
	}
	c, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, nil, err
	}
	return c, func() {
		cctx, cancel := context.WithTimeout(context.Background(), destroyWriteTimeout)
		defer cancel()
		_ = c.Close(cctx)
	}, nil
}
