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

// startSQL is pg_postmaster_start_time in unix microseconds, and epochSQL
// the last reset of the archiver's statistics (0 if none), which every
// crash recovery renews (serverRun). Integers, so that the session's
// TimeZone does not enter the comparison.
const (
	startSQL = `round(extract(epoch from pg_postmaster_start_time()) * 1000000)::int8`
	epochSQL = `coalesce(round(extract(epoch from (select stats_reset from pg_stat_get_archiver())) * 1000000)::int8, 0)`
)

// flushedSQL is how far the server's WAL is flushed, as an integer; 0 on a
// server in recovery.
const flushedSQL = `case when pg_is_in_recovery() then 0 else (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::int8 end`

// runSQL captures the run of the server (serverRun) and its flushed WAL
// position, in the order of parseRun.
const runSQL = timelineSQL + ", " + startSQL + ", " + epochSQL + ", " + flushedSQL

// systemSQL captures, when a connection is made, what a resolution needs to
// know of its server: the system identifier (shared by a primary and its
// standbys), whether it is in recovery, whether it has the functions
// resolution uses, the pid of the session's backend (a pooler hands out
// pids of its own), and the server's run.
const systemSQL = `select (select system_identifier from pg_control_system()), pg_is_in_recovery(),
	to_regproc('pg_catalog.pg_xact_status') is not null and to_regproc('pg_catalog.pg_current_xact_id') is not null,
	pg_backend_pid(), ` + runSQL + `,
	coalesce((select round(extract(epoch from backend_start) * 1000000)::int8 from pg_stat_activity where pid = pg_backend_pid()), 0)`

// backendXidSQL finds the transaction that backend $1, started at $2 (unix
// microseconds), runs now: its id's low 32 bits (as pg_stat_activity shows
// it) and the server's next id, from which the id's epoch follows. No row
// when the backend is gone or runs no transaction with an id.
const backendXidSQL = `select a.backend_xid::text::int8, pg_snapshot_xmax(pg_current_snapshot())::text::int8
from pg_stat_activity a
where a.pid = $1::text::int4 and a.backend_xid is not null
	and round(extract(epoch from a.backend_start) * 1000000)::int8 = $2::text::int8`

// askSQL asks what became of a transaction ($1, an xid8) that ran on system
// $2, in the run of the server given by timeline $3, start $7 and epoch $8.
// It reports the system and run of the server it reached, the status of
// the id there (only on the same system, out of recovery: "not yet
// assigned" when the server has not given it, checked by giving the
// question an id of its own, below which every id has been given), whether
// the id is a prepared transaction's, and the server's latest checkpoint:
// its timeline, WAL position, next id, and whether it is of the shutdown
// kind (its redo point is its own record; see checkpoint).
//
// Within the same run it also reports the state of the backend that runs
// the transaction, if one still does (a backend in the middle of a pipeline,
// active but waiting to read from its client, is idle in the transaction
// as far as resolution goes: it has run what it received): the backend whose transaction id is
// $4 (the id's low 32 bits, as pg_stat_activity shows it; no two running
// transactions share it), which is provably ours. While the transaction is
// in progress, it ends that backend when $5 says so: 2, at once; 1, only if
// it is still idle in the transaction since the same state change ($6,
// unix microseconds), so it has received nothing since it was last seen.
// Once the backend is gone the status is definitive: committed if COMMIT
// had written its record, aborted otherwise.
//
// A "committed" is only as durable as the server's COMMIT would have made
// it. A COMMIT cut while it waited for a synchronous standby has committed
// locally only, and is lost if that standby is promoted. So when the server
// has synchronous standbys and the session's synchronous_commit waits for
// them, a question that finds the transaction committed writes a
// transactional logical message (the least WAL a plain role can write; it
// is decoded by no table's subscription), which makes its own commit, at
// the end of the question, wait for the standbys as the transaction's
// COMMIT would have: its answer arrives only once the WAL up to it, the
// transaction's commit record included, is where the transaction's COMMIT
// needed it. With no standby streaming at all, no question waits (the last
// column is false: "committed", not yet durable, is no answer). A question
// whose wait outlives it stays waiting on the server until the standbys
// answer; while one does, later questions do not wait again, so a standby
// that stays away holds one backend, not one per question.
const askSQL = `with s as (
	select c.system_identifier as sys, ` + timelineSQL + ` as tl, ` + startSQL + ` as st, ` + epochSQL + ` as ep
	from pg_control_system() c
), x as (
	select sys, tl, st, ep,
		sys = $2::text::int8 and tl = $3::text::int4 and st = $7::text::int8 and ep = $8::text::int8 as same,
		case when sys = $2::text::int8 and tl <> 0 then
			case when $1::text::xid8 >= pg_current_xact_id() then 'not yet assigned' else pg_xact_status($1::text::xid8) end
		end as status
	from s
), k as (
	select timeline_id, (checkpoint_lsn - '0/0'::pg_lsn)::int8 as lsn,
		split_part(next_xid, ':', 1)::int8 * 4294967296 + split_part(next_xid, ':', 2)::int8 as next,
		checkpoint_lsn = redo_lsn and current_setting('wal_level') <> 'minimal' as shutdown
	from pg_control_checkpoint()
), b as (
	select pid, case when state = 'active' and wait_event = 'ClientRead' then 'idle in transaction (reading from the client)'
		else state end as state, round(extract(epoch from state_change) * 1000000)::int8 as changed
	from pg_stat_activity where backend_xid = $4::text::xid
)
select x.sys, x.tl, x.st, x.ep, x.status, exists (select 1 from pg_prepared_xacts where transaction = $4::text::xid),
	k.timeline_id, k.lsn, k.next, k.shutdown, coalesce(b.state, ''), coalesce(b.changed, 0),
	case when x.same and x.status = 'in progress' and b.pid is not null and ($5::text::int4 = 2
		or ($5::text::int4 = 1 and b.state like 'idle in transaction%' and b.changed = $6::text::int8))
	then pg_terminate_backend(b.pid) else false end,
	case when x.status = 'committed' and current_setting('synchronous_standby_names') <> ''
		and current_setting('synchronous_commit') not in ('off', 'local')
	then exists (select 1 from pg_stat_replication)
		and not exists (select 1 from pg_stat_activity where pid <> pg_backend_pid() and wait_event = 'SyncRep'
			and query like '%pgtx: resolved a commit%')
		and pg_logical_emit_message(true, 'pgtx', 'pgtx: resolved a commit') is not null
	else true end
from x cross join k left join b on x.same`

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
	standby bool
	system  int64
	// run and flushed are the server's run and its flushed WAL position
	// when the connection was made (run.timeline is 0 when made on a
	// standby).
	run     serverRun
	flushed int64
	// backendStart is the session's backend start (unix microseconds; 0
	// when not visible): with the pid, the backend's identity.
	backendStart int64
	// direct: the session's backend pid is the connection's, so the
	// backend lives as long as the connection and every transaction on it
	// runs in the run captured here. Behind a pooler the server connection
	// can change under the client's, and each transaction captures its own
	// (with the id: captureRun).
	direct bool
}

// prepare captures the server's identity for resolution. A server that
// cannot be asked leaves the connection without (its lost COMMITs are
// ErrCommitUnknown); only a connection that failed is an error.
func (r *connResolve) prepare(ctx context.Context, conn *pgx.Conn) error {
	if !mayResolve(conn.PgConn().ParameterStatus) {
		return nil
	}
	var ok bool
	var pid uint32
	err := conn.QueryRow(ctx, systemSQL, pgx.QueryExecModeSimpleProtocol).Scan(&r.system, &r.standby, &ok, &pid,
		&r.run.timeline, &r.run.start, &r.run.epoch, &r.flushed, &r.backendStart)
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
	r.direct = pid == conn.PgConn().PID()
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
	view view
	// state and changed are the backend's state and the time of its last
	// change (unix microseconds), while it runs the transaction in the
	// run that gave its id.
	state   string
	changed int64
	// terminated: the question ended the backend.
	terminated bool
	// synced: a "committed" is as durable as the transaction's COMMIT
	// would have made it (the question's own commit waited for the
	// server's synchronous standbys, or there were none to wait for).
	synced bool
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
	var (
		a      answer
		v      = &a.view
		status *string
		next   int64
	)
	err = conn.QueryRow(actx, askSQL, pgx.QueryExecModeExec,
		xidText(id.xid), strconv.FormatInt(id.system, 10), strconv.FormatInt(int64(id.run.timeline), 10),
		strconv.FormatUint(id.xid&0xffffffff, 10), strconv.Itoa(end), strconv.FormatInt(changed, 10),
		strconv.FormatInt(id.run.start, 10), strconv.FormatInt(id.run.epoch, 10),
	).Scan(&v.system, &v.run.timeline, &v.run.start, &v.run.epoch, &status, &v.prepared,
		&v.last.timeline, &v.last.lsn, &next, &v.last.shutdown, &a.state, &a.changed, &a.terminated, &a.synced)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		// Not allowed to end the backend: wait for it to end instead.
		r.cannotTerminate.Store(true)
		return answer{err: err}
	default:
		return answer{err: err}
	}
	if status != nil {
		v.status = *status
	}
	v.last.nextXid = uint64(next)
	return a
}

// backendXid finds the id of the transaction that a direct connection's
// backend (pid, started at start) still runs: the id of a transaction
// whose COMMIT's write was sent but whose id never arrived, while COMMIT
// has not ended it. It asks until ctx ends; false when the backend runs no
// transaction with an id (it ended, or the backend is gone).
func (r *resolver) backendXid(ctx context.Context, pid uint32, start int64, sleep func(context.Context) error) (uint64, bool) {
	for {
		actx, cancel := context.WithTimeout(ctx, r.timeout/askShare)
		conn, release, err := r.conn(actx)
		if err == nil {
			var lo, next int64
			err = conn.QueryRow(actx, backendXidSQL, pgx.QueryExecModeExec,
				strconv.FormatUint(uint64(pid), 10), strconv.FormatInt(start, 10)).Scan(&lo, &next)
			release()
			if err == nil {
				cancel()
				return xidOf(uint32(lo), uint64(next)), true
			}
		}
		cancel()
		if errors.Is(err, pgx.ErrNoRows) || sleep(ctx) != nil {
			return 0, false
		}
	}
}

// xidOf is the full id whose low 32 bits are lo, given the server's next
// id: a running transaction's id is below next and within 2^31 of it.
func xidOf(lo uint32, next uint64) uint64 {
	epoch := next >> 32
	if uint64(lo) > next&0xffffffff && epoch > 0 {
		epoch--
	}
	return epoch<<32 | uint64(lo)
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
