package cancel

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/cancelquery"
	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/slotlimit"
)

// Open returns a Canceller with s, on clk. In [ModePool] it first opens
// the cancel pool, with the config [PoolConfig] derives from ps, as
// s.Pool; the Canceller owns it, and [Canceller.Close] closes it. In the
// other modes ps is not used.
//
// The cancel pool's connects, its warm one first, wait until the main pool
// has a connection set up ([Handler.SetReady]): no cancel can be needed
// before, and a new pool's first connect, for which its caller waits, does
// not share the server with it.
//
// ps.Slots keeps the cancel pool within the slots the server gives it
// ([slotlimit.Limit]): a connect refused for lack of slots waits for the
// pool's own connection, when it holds one.
func Open(ctx context.Context, s Settings, ps PoolSettings, clk Clock) (*Canceller, error) {
	c := New(s, clk)
	if s.Mode != ModePool {
		return c, nil
	}
	cp, err := PoolConfig(ps)
	if err != nil {
		return nil, err
	}
	var made atomic.Pointer[pgxpool.Pool] // set below; its MinConns may connect before
	ss := ps.Slots
	ss.Max = int(cp.MaxConns)
	ss.Stat = slotlimit.PoolStat(&made)
	limit := slotlimit.New(ss)
	lim := &Limited{Limit: limit, yield: ps.Yield}
	cp.ConnConfig.Tracer = releases{lim}
	before := cp.BeforeConnect
	cp.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
		cc.Tracer = nil // the release tracer is the pool's, not the connection's
		if lim.yielding() && ctx.Value(onDemand{}) == nil {
			// Not a cancel's: the warm connection the main pool's server
			// has no slot for.
			return slotlimit.ErrNoSlot
		}
		if err := limit.Connecting(ctx); err != nil {
			return err
		}
		if err := c.waitMainReady(ctx); err != nil {
			return err
		}
		if before != nil {
			return before(ctx, cc)
		}
		return nil
	}
	cp.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if lim.yielding() && ctx.Value(onDemand{}) == nil {
			return slotlimit.ErrNoSlot // the main pool was refused while it connected
		}
		if err := warm(ctx, conn); err != nil {
			return err
		}
		limit.Connected(ctx)
		return nil
	}
	// cp comes from pgxpool.ParseConfig: pgxpool does not panic on it.
	pool, err := pgxpool.NewWithConfig(ctx, cp)
	if err != nil {
		return nil, fmt.Errorf("pgtx: cancel pool: %w", err)
	}
	made.Store(pool)
	lim.Pool = pool
	c.limited = lim
	c.s.Pool = limitedPool{c.limited}
	c.pool = pool
	c.s.Node = nodeCanceller(cp.ConnConfig, before)
	return c, nil
}

// PoolSettings configures the cancel pool ([PoolConfig]). Its owner has
// applied every default already.
type PoolSettings struct {
	// ConnConfig is the main pool's connection config as the caller made
	// it, before pgtx installed its handler: the cancel pool reaches the
	// same server, as the same role, over the same TLS.
	ConnConfig *pgx.ConnConfig
	// BeforeConnect is the caller's hook of the main pool.
	BeforeConnect func(context.Context, *pgx.ConnConfig) error
	// ConnString, when set, is the cancel pool's own connection string (a
	// role of its own): ConnConfig and BeforeConnect are then not used.
	ConnString string
	// ConnectTimeout bounds a connect; 0: no bound.
	ConnectTimeout time.Duration
	// StatementTimeoutMillis is the statement_timeout of the cancel pool's
	// sessions; 0: none sent.
	StatementTimeoutMillis int64
	// SessionParams, when set, completes the startup parameters of the
	// cancel pool's sessions as the main pool's are (the client encoding).
	SessionParams func(params map[string]string)
	// Main is the main pool's config, whose connection lifetimes and health
	// checks the cancel pool shares.
	Main *pgxpool.Config
	// Slots are the settings of the cancel pool's [slotlimit.Limit], but for
	// Max and Stat, which Open sets.
	Slots slotlimit.Settings
	// Yield, when set, reports that the main pool's server has no slot to
	// spare: the cancel pool then keeps no connection idle ([Limited]).
	Yield func() bool
}

// PoolConfig derives the cancel pool's config: the main pool's server, role
// and TLS, its own size and connect timeout, pgx's default context handling
// and none of the main pool's hooks but BeforeConnect (unless ConnString
// names its own role). One connection is kept warm, so the first cancel
// does not pay a connect.
func PoolConfig(s PoolSettings) (*pgxpool.Config, error) {
	cp, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cc := s.ConnConfig.Copy()
	if s.ConnString != "" {
		parsed, err := pgx.ParseConfig(s.ConnString)
		if err != nil {
			return nil, fmt.Errorf("pgtx: CancelConnString: %w", err)
		}
		cc = parsed
	}
	cc.ConnectTimeout = s.ConnectTimeout
	cc.BuildContextWatcherHandler = func(pgConn *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pgConn.Conn()}
	}
	cc.Tracer = nil
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	if s.StatementTimeoutMillis > 0 {
		cc.RuntimeParams["statement_timeout"] = fmt.Sprint(s.StatementTimeoutMillis)
	}
	delete(cc.RuntimeParams, "idle_in_transaction_session_timeout")
	if s.SessionParams != nil {
		s.SessionParams(cc.RuntimeParams)
	}
	if app := cc.RuntimeParams["application_name"]; app != "" {
		cc.RuntimeParams["application_name"] = app + " (pgtx cancel)"
	}
	cp.ConnConfig = cc
	if s.ConnString == "" {
		// The caller's credentials may come from its hook (an IAM token, a
		// password fetched per connection): the cancel pool logs in as the
		// main pool does.
		cp.BeforeConnect = s.BeforeConnect
	}
	cp.AfterConnect = warm
	cp.MaxConns = poolSize
	cp.MinConns = 1 // kept warm: the first cancel does not pay a connect
	cp.MaxConnIdleTime = s.Main.MaxConnIdleTime
	cp.MaxConnLifetime = s.Main.MaxConnLifetime
	cp.HealthCheckPeriod = s.Main.HealthCheckPeriod
	return cp, nil
}

// warm runs both cancel queries on a new cancel-pool connection for a pid
// no backend has, so that the first cancel does not pay for the new
// backend's cold catalog caches (pg_stat_activity's view), nor, behind
// Pgpool-II, for its child's first look at the statement's tables and
// functions: 3-5ms instead of 7-9ms from a deadline to the lock released
// there. Its failures are the cancels' to meet: a connection that broke
// is the pool's error.
func warm(ctx context.Context, conn *pgx.Conn) error {
	for _, sql := range [...]string{cancelquery.Cancel, cancelquery.CancelActive} {
		var visible, signalled bool
		var ours *bool
		err := conn.QueryRow(ctx, sql, pgx.QueryExecModeExec, int64(0), int64(0)).Scan(&visible, &ours, &signalled)
		var pgErr *pgconn.PgError
		switch {
		case err == nil, errors.Is(err, pgx.ErrNoRows):
		case errors.As(err, &pgErr) && !classify.EndsSession(pgErr) && !conn.IsClosed():
			// Refused (a server without pg_stat_activity as PostgreSQL
			// has it): the cancels will fall back.
		default:
			return fmt.Errorf("pgtx: cancel pool: warm the cancel queries: %w", err)
		}
	}
	return nil
}
