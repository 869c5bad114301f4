package cancelquery

// Cancel cancels the backend $1 only if it is still the one the connection
// was made to, the one that started at $2 (a pid alone may have been
// recycled by a stranger's session), and says whether the caller's role
// could see its identity at all (without pg_read_all_stats, or membership
// in the backend's role, pg_stat_activity shows another role's backend
// with backend_start NULL) and whether it is that backend. It returns
// (visible, ours, signalled), or no row when no backend has that pid. The
// start is in unix microseconds, computed as the connection's probe
// computed it, so that both sides round alike (on PostgreSQL 13 extract
// returns a double).
const Cancel = `select backend_start is not null, ` + ours + `,
	case when ` + ours + ` then pg_cancel_backend(pid) else false end
	from pg_stat_activity where pid = $1`

// CancelActive is Cancel for a backend that is signalled only while it
// runs a statement: one that is not runs none of the connection's, which
// another backend runs (behind Pgpool-II, a standby's).
const CancelActive = `select backend_start is not null, ` + ours + `,
	case when ` + ours + ` and state = 'active' then pg_cancel_backend(pid) else false end
	from pg_stat_activity where pid = $1`

// ours compares the backend's start with $2, in unix microseconds.
const ours = `round(extract(epoch from backend_start) * 1000000)::int8 = $2::int8`
