package resolve

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// closeTimeout bounds the goodbye written to a question's own connection
// when it is closed.
const closeTimeout = 50 * time.Millisecond

// askShare bounds one question of a resolution to this fraction of
// ResolveTimeout, so that a connection that hangs does not take the whole
// of it, while a slow network still leaves each question time to connect.
const askShare = 4

// Resolver asks what became of transactions, on connections that the main
// pool's exhaustion cannot block: the cancel pool's (CancelModePool), or a
// connection of its own made for the question.
type Resolver struct {
	timeout time.Duration   // ResolveTimeout
	pool    Pool            // the cancel pool; nil: connect directly
	direct  *pgx.ConnConfig // the main pool's server, without pgtx's hooks
	// beforeConnect is the caller's pgxpool BeforeConnect, run on a copy of
	// direct before each connect, as the main pool runs it.
	beforeConnect func(context.Context, *pgx.ConnConfig) error
	// cannotTerminate is set when the server refuses to end a backend (the
	// role may not), and cannotMessage when it refuses the role
	// pg_logical_emit_message, so later questions do not fail on them.
	cannotTerminate, cannotMessage atomic.Bool
}

// Pool is the cancel pool as a [Resolver] takes its connections.
type Pool interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// NewResolver builds the resolver of a pool: over cancelPool when it is
// not nil, else connecting with connConfig (the caller's, before pgtx installed
// its hooks) and the caller's beforeConnect, as the main pool connects.
// timeout is the ResolveTimeout.
func NewResolver(timeout time.Duration, cancelPool Pool, connConfig *pgx.ConnConfig, beforeConnect func(context.Context, *pgx.ConnConfig) error) *Resolver {
	if cancelPool != nil {
		return &Resolver{timeout: timeout, pool: cancelPool}
	}
	cc := connConfig.Copy() // the caller's, before pgtx installed its handler
	cc.Tracer = nil
	cc.BuildContextWatcherHandler = func(pgConn *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pgConn.Conn()}
	}
	return &Resolver{timeout: timeout, direct: cc, beforeConnect: beforeConnect}
}

// Ask asks once; end says whether to end the backend, and since when
// (changed) it must have been idle for EndIfStillIdle.
func (r *Resolver) Ask(ctx context.Context, id ID, end End, changed int64) Answer {
	actx, cancel := context.WithTimeout(ctx, r.timeout/askShare)
	defer cancel()
	conn, release, err := r.conn(actx)
	if err != nil {
		return Answer{Err: err}
	}
	defer release()
	if r.cannotTerminate.Load() {
		end = Keep
	}
	var (
		a      Answer
		v      = &a.View
		status *string
		next   int64
	)
	sql := askSQL
	if r.cannotMessage.Load() {
		sql = askNoMessageSQL
	}
	var pid int64
	err = conn.QueryRow(actx, sql, pgx.QueryExecModeExec,
		strconv.FormatUint(id.Xid, 10), strconv.FormatInt(id.System, 10), strconv.FormatInt(int64(id.Run.Timeline), 10),
		strconv.FormatUint(id.Xid&0xffffffff, 10), strconv.FormatInt(id.Run.Start, 10), strconv.FormatInt(id.Run.Epoch, 10),
	).Scan(&v.System, &v.Run.Timeline, &v.Run.Start, &v.Run.Epoch, &status, &v.Prepared,
		&v.Last.Timeline, &v.Last.LSN, &next, &v.Last.Shutdown, &a.State, &a.Changed, &a.Synced,
		&v.Replay, &v.Replayed, &pid)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		// The role may not write the message (refused as the statement
		// starts, whatever the branch): the next questions do without.
		r.cannotMessage.Store(true)
		return Answer{Err: err}
	case err != nil:
		return Answer{Err: err}
	}
	if end != Keep && pid != 0 {
		a.Terminated, err = r.terminate(actx, conn, pid, id.Xid&0xffffffff, end, changed)
		if errors.As(err, &pgErr) && pgErr.Code == "42501" {
			// Not allowed to end the backend: wait for it to end.
			r.cannotTerminate.Store(true)
		}
		if err != nil {
			return Answer{Err: err}
		}
	}
	if status != nil {
		v.Status = *status
	}
	v.Last.NextXid = uint64(next)
	return a
}

// terminate ends backend pid, if it still runs the transaction as end says
// ([terminateSQL]), and reports whether it did.
func (r *Resolver) terminate(ctx context.Context, conn *pgx.Conn, pid int64, xidLo uint64, end End, changed int64) (bool, error) {
	rows, err := conn.PgConn().Exec(ctx, fmt.Sprintf(terminateSQL, pid, xidLo, end == EndNow, changed)).ReadAll()
	if err != nil {
		return false, err
	}
	last := rows[len(rows)-1]
	return len(last.Rows) == 1 && string(last.Rows[0][0]) == "t", last.Err
}

// BackendXid finds the id of the transaction that a direct connection's
// backend (pid, started at start) still runs: the id of a transaction
// whose COMMIT's write was sent but whose id never arrived, while COMMIT
// has not ended it. It asks until ctx ends; false when the backend runs no
// transaction with an id (it ended, or the backend is gone).
func (r *Resolver) BackendXid(ctx context.Context, pid uint32, start int64, sleep func(context.Context) error) (uint64, bool) {
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
func (r *Resolver) conn(ctx context.Context) (*pgx.Conn, func(), error) {
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
		cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = c.Close(cctx)
	}, nil
}
