package resolve

// timelineSQL is the server's current timeline: the first eight hex digits
// of the name of the WAL file it writes. 0 on a server in recovery, which
// writes none (and where pg_walfile_name fails).
const timelineSQL = `case when pg_is_in_recovery() then 0
		else ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::int end`

// startSQL is pg_postmaster_start_time in unix microseconds, and epochSQL
// the last reset of the archiver's statistics (0 if none), which every
// crash recovery renews ([Run]). Integers, so that the session's
// TimeZone does not enter the comparison.
const (
	startSQL = `round(extract(epoch from pg_postmaster_start_time()) * 1000000)::int8`
	epochSQL = `coalesce(round(extract(epoch from (select stats_reset from pg_stat_get_archiver())) * 1000000)::int8, 0)`
)

// flushedSQL is how far the server's WAL is flushed, as an integer; 0 on a
// server in recovery.
const flushedSQL = `case when pg_is_in_recovery() then 0 else (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::int8 end`

// RunSQL captures the run of the server ([Run]) and its flushed WAL
// position, in the order of [ParseRun]: the columns a transaction reads
// with its id behind a pooler.
const RunSQL = timelineSQL + ", " + startSQL + ", " + epochSQL + ", " + flushedSQL

// systemSQL captures, when a connection is made, what a resolution needs to
// know of its server: the system identifier (shared by a primary and its
// standbys), whether it is in recovery, whether it has the functions
// resolution uses, the pid of the session's backend (a pooler hands out
// pids of its own), the server's run, and whether the session may write
// the message that marks a transaction's WAL ([Conn].Emit). The backend's
// start is read from pg_stat_get_activity of its own pid, not the
// pg_stat_activity view, whose joins cost a new backend's cold catalog
// caches twice as much as the rest of the question.
const systemSQL = `select (select system_identifier from pg_control_system()), pg_is_in_recovery(),
	to_regproc('pg_catalog.pg_xact_status') is not null and to_regproc('pg_catalog.pg_current_xact_id') is not null,
	pg_backend_pid(), ` + RunSQL + `,
	coalesce((select round(extract(epoch from a.backend_start) * 1000000)::int8 from pg_stat_get_activity(pg_backend_pid()) a), 0),
	coalesce(has_function_privilege(to_regprocedure('pg_catalog.pg_logical_emit_message(boolean,text,text)'), 'execute'), false)`

// backendXidSQL finds the transaction that backend $1, started at $2 (unix
// microseconds), runs now: its id's low 32 bits (as pg_stat_activity shows
// it) and the server's next id, from which the id's epoch follows. No row
// when the backend is gone or runs no transaction with an id.
const backendXidSQL = `select a.backend_xid::text::int8, pg_snapshot_xmax(pg_current_snapshot())::text::int8
from pg_stat_activity a
where a.pid = $1::text::int4 and a.backend_xid is not null
	and round(extract(epoch from a.backend_start) * 1000000)::int8 = $2::text::int8`

// askSQL asks what became of a transaction ($1, an xid8) that ran on system
// $2, in the run of the server given by timeline $3, start $5 and epoch $6.
// It reports the system and run of the server it reached, the status of
// the id there (only on the same system, out of recovery: "not yet
// assigned" when the server has not given it, checked by giving the
// question an id of its own, below which every id has been given), whether
// the id is a prepared transaction's, and the server's latest checkpoint:
// its timeline, WAL position, next id, and whether it is of the shutdown
// kind (its redo point is its own record; see [Checkpoint]).
//
// Within the same run it also reports the state of the backend that runs
// the transaction, if one still does (a backend in the middle of a pipeline,
// active but waiting to read from its client, is idle in the transaction
// as far as resolution goes: it has run what it received): the backend whose transaction id is
// $4 (the id's low 32 bits, as pg_stat_activity shows it; no two running
// transactions share it), which is provably ours, and its pid while the
// transaction is in progress, which [terminateSQL] ends when resolution
// says so. Once the backend is gone the status is definitive: committed if
// COMMIT had written its record, aborted otherwise.
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
//
// Then, where the server's run stopped replaying WAL and whether it
// replayed a transaction's end in archive recovery ([View].Replay). Last,
// the pid of the backend that runs the transaction while it is in
// progress in the same run (0: none), which [terminateSQL] ends behind
// Pgpool-II.
const askSQL = askSQLHead + askSyncSQL + askSQLTail

// askNoMessageSQL is askSQL for a role that may not call
// pg_logical_emit_message (an administrator revoked it): a question that
// cannot wait for the synchronous standbys never finds a "committed"
// durable while there are some.
const askNoMessageSQL = askSQLHead + "false" + askSQLTail

// askSyncSQL writes the question's message (see askSQL).
const askSyncSQL = `pg_logical_emit_message(true, 'pgtx', 'pgtx: resolved a commit') is not null`

const askSQLHead = `with s as (
	select c.system_identifier as sys, ` + timelineSQL + ` as tl, ` + startSQL + ` as st, ` + epochSQL + ` as ep
	from pg_control_system() c
), x as (
	select sys, tl, st, ep,
		sys = $2::text::int8 and tl = $3::text::int4 and st = $5::text::int8 and ep = $6::text::int8 as same,
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
	case when x.status = 'committed' and current_setting('synchronous_standby_names') <> ''
		and current_setting('synchronous_commit') not in ('off', 'local')
	then exists (select 1 from pg_stat_replication)
		and not exists (select 1 from pg_stat_activity where pid <> pg_backend_pid() and wait_event = 'SyncRep'
			and query like '%pgtx: resolved a commit%')
		and `
const askSQLTail = `
	else true end,
	coalesce((pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::int8, 0), pg_last_xact_replay_timestamp() is not null,
	case when x.same and x.status = 'in progress' then coalesce(b.pid, 0) else 0 end
from x cross join k left join b on x.same`

// terminateSQL ends backend %[1]d if it still runs the transaction whose
// id's low 32 bits are %[2]d and, unless %[3]t (end it now), is still idle
// in it since the same state change (%[4]d, unix microseconds), so that it
// has received nothing since it was last seen. The pid is a literal, in a
// simple query of its own: Pgpool-II, which may be in front unseen,
// recognises that form, sends it to the node that runs the backend, and
// does not take the backend's end for that node's failure (it detaches a
// node whose backend a query it does not recognise ends).
const terminateSQL = `select pg_terminate_backend(%[1]d) from pg_stat_activity
where pid = %[1]d and backend_xid = '%[2]d'::xid and (%[3]t or (
	(state like 'idle in transaction%%' or (state = 'active' and wait_event = 'ClientRead'))
	and round(extract(epoch from state_change) * 1000000)::int8 = %[4]d))`
