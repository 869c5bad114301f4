package cancelquery

// Identity captures, when a connection is made, the pid of the backend
// serving it and that backend's start time: together they name the backend
// where a pid alone may be recycled. It reads the row of that one pid from
// pg_stat_get_activity, the function under the pg_stat_activity view: a
// new backend, whose catalog caches are cold, answers the view's joins and
// rewrite in several times the function's time, and every connect waits
// for it.
const Identity = "select pid, backend_start from pg_stat_get_activity(pg_backend_pid())"

// Cancel cancels the backend $1 only if it is still the one the connection
// was made to, the one that started at $2 (a pid alone may have been
// recycled by a stranger's session), and says whether the caller's role
// could see its identity at all (without pg_read_all_stats, or membership
// in the backend's role, pg_stat_activity shows another role's backend
// with backend_start NULL) and whether it is that backend. It returns
// (visible, ours, signalled), or no row when no backend has that pid.
const Cancel = `select backend_start is not null, backend_start = $2,
	case when backend_start = $2 then pg_cancel_backend(pid) else false end
	from pg_stat_activity where pid = $1`

// CancelActive is Cancel for a backend that is signalled only while it
// runs a statement: one that is not runs none of the connection's, which
// another backend runs (behind Pgpool-II, a standby's).
const CancelActive = `select backend_start is not null, backend_start = $2,
	case when backend_start = $2 and state = 'active' then pg_cancel_backend(pid) else false end
	from pg_stat_activity where pid = $1`
