package resolve

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/internal/slotlimit"
)

// surveySQL asks a server, in one statement, what became of a pool's
// acknowledged commits and how it replicates: $1 is their ids (an array of
// xid8, as text), $2 the system they ran on. It reports the server's system
// and run, its latest checkpoint (as askSQL does), the status of each id in
// the order given (only on the same system, out of recovery: "not yet
// assigned" when the server has not given it; "" when it no longer knows
// it), the standbys streaming from it, synchronous_standby_names and the
// session's synchronous_commit. A standby is a walsender without a
// database (a logical replication's walsender has one): the pid and the
// database of every session are visible to a plain role, which sees the
// rows of pg_stat_replication but not their state. Last, as askSQL, where
// the server's run stopped replaying WAL and whether it replayed a
// transaction's end in archive recovery ([View].Replay).
const surveySQL = `select c.system_identifier, ` + timelineSQL + `, ` + startSQL + `, ` + epochSQL + `,
	k.timeline_id, (k.checkpoint_lsn - '0/0'::pg_lsn)::int8,
	split_part(k.next_xid, ':', 1)::int8 * 4294967296 + split_part(k.next_xid, ':', 2)::int8,
	k.checkpoint_lsn = k.redo_lsn and current_setting('wal_level') <> 'minimal',
	case when c.system_identifier = $2::text::int8 and not pg_is_in_recovery() then
		array(select case when u.x >= pg_current_xact_id() then 'not yet assigned' else coalesce(pg_xact_status(u.x), '') end
			from unnest($1::text::xid8[]) with ordinality as u(x, n) order by u.n)
	end,
	(select count(*) from pg_stat_get_wal_senders() w join pg_stat_get_activity(null) a on a.pid = w.pid
		where a.datid is null),
	current_setting('synchronous_standby_names'), current_setting('synchronous_commit'),
	coalesce((pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::int8, 0), pg_last_xact_replay_timestamp() is not null
from pg_control_system() c cross join pg_control_checkpoint() k`

// Survey is what one question found about a pool's acknowledged commits
// and how the server replicates.
type Survey struct {
	// View is the server's system, run, latest checkpoint and replay end
	// (its Status is per id, in Statuses).
	View View
	// Statuses has the status of each id asked, in order: as
	// [View].Status. nil when the server cannot judge (another system, in
	// recovery).
	Statuses []string
	// Replication is how the server replicates.
	Replication Replication
}

// Replication is how a server replicates its commits.
type Replication struct {
	// Standbys counts the standbys streaming from the server.
	Standbys int
	// SynchronousStandbyNames and SynchronousCommit are the server's
	// settings, as the question's session saw them.
	SynchronousStandbyNames string
	SynchronousCommit       string
}

// Asynchronous reports that the server acknowledges commits that no
// standby has: standbys stream from it, and its commits wait for none of
// them (synchronous_standby_names is empty, or synchronous_commit is local
// or off). A failover to one of them can discard acknowledged commits.
func (r Replication) Asynchronous() bool {
	return r.Standbys > 0 && (r.SynchronousStandbyNames == "" ||
		r.SynchronousCommit == "local" || r.SynchronousCommit == "off")
}

// Survey asks, once, on the resolver's connection, what became of the
// commits xids of system, and how the server replicates. It is routine
// ([slotlimit.Routine]): a cancel pool that gave its slots back while the
// server is full does not connect for it, and it fails at once.
func (r *Resolver) Survey(ctx context.Context, system int64, xids []uint64) (Survey, error) {
	actx, cancel := context.WithTimeout(slotlimit.Routine(ctx), r.timeout/askShare)
	defer cancel()
	conn, release, err := r.conn(actx)
	if err != nil {
		return Survey{}, err
	}
	defer release()
	var (
		s        Survey
		v        = &s.View
		next     int64
		standbys int64
	)
	err = conn.QueryRow(actx, surveySQL, pgx.QueryExecModeExec, xidArray(xids), strconv.FormatInt(system, 10)).Scan(
		&v.System, &v.Run.Timeline, &v.Run.Start, &v.Run.Epoch,
		&v.Last.Timeline, &v.Last.LSN, &next, &v.Last.Shutdown, &s.Statuses,
		&standbys, &s.Replication.SynchronousStandbyNames, &s.Replication.SynchronousCommit,
		&v.Replay, &v.Replayed)
	if err != nil {
		return Survey{}, err
	}
	v.Last.NextXid = uint64(next)
	s.Replication.Standbys = int(standbys)
	return s, nil
}

// xidArray is xids as the text of an array: {1,2,3}.
func xidArray(xids []uint64) string {
	var b strings.Builder
	b.Grow(2 + 11*len(xids))
	b.WriteByte('{')
	for i, x := range xids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(x, 10))
	}
	b.WriteByte('}')
	return b.String()
}
