package pgtx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/cancelquery"
)

// The statements of the cancel path, shared with the integration tests.
const (
	identitySQL = cancelquery.Identity
	cancelSQL   = cancelquery.Cancel
)

// poolUnhealthyFor is how long the cancel pool is skipped after it could not
// be reached or used, so a storm of cancels does not pay a failing attempt
// each.
const poolUnhealthyFor = time.Second

// cancelPoolAcquireShare bounds the wait for a cancel-pool connection to
// this fraction of the grace: a cancel pool busy with other cancels is not
// worth the whole grace when the protocol cancel can go at once.
const cancelPoolAcquireShare = 4

// cancelPoolConfig derives the cancel pool's config from the main one: same
// server, role and TLS, its own size and short connect timeout, pgx's
// default context handling and none of the main pool's hooks but BeforeConnect
// (unless CancelConnString names its own role). Its sessions
// get a statement_timeout of the grace, unless Config.StatementTimeout is
// negative (which also tells pgtx to send no startup parameter a pooler
// would refuse).
func cancelPoolConfig(cfg *Config, mainCfg *pgxpool.Config) (*pgxpool.Config, error) {
	cp, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cc := cfg.ConnConfig.Copy() // the caller's, before pgtx installed its handler
	if cfg.CancelConnString != "" {
		parsed, err := pgx.ParseConfig(cfg.CancelConnString)
		if err != nil {
			return nil, fmt.Errorf("pgtx: CancelConnString: %w", err)
		}
		cc = parsed
	}
	cc.ConnectTimeout = defaultOrNone(cfg.CancelConnectTimeout, defaultCancelConnectTimeout)
	cc.BuildContextWatcherHandler = func(pgConn *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pgConn.Conn()}
	}
	cc.Tracer = nil
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	if grace := defaultOrNone(cfg.CancelGrace, defaultCancelGrace); cfg.StatementTimeout >= 0 && grace > 0 {
		cc.RuntimeParams["statement_timeout"] = fmt.Sprint(durationMillis(grace))
	}
	delete(cc.RuntimeParams, "idle_in_transaction_session_timeout")
	askUTF8(cc.RuntimeParams)
	if app := cc.RuntimeParams["application_name"]; app != "" {
		cc.RuntimeParams["application_name"] = app + " (pgtx cancel)"
	}
	cp.ConnConfig = cc
	if cfg.CancelConnString == "" {
		// The caller's credentials may come from its hook (an IAM token, a
		// password fetched per connection): the cancel pool logs in as the
		// main pool does.
		cp.BeforeConnect = cfg.BeforeConnect
	}
	cp.MaxConns = cancelPoolSize
	cp.MinConns = 1 // kept warm: the first cancel does not pay a connect
	cp.MaxConnIdleTime = mainCfg.MaxConnIdleTime
	cp.MaxConnLifetime = mainCfg.MaxConnLifetime
	cp.HealthCheckPeriod = mainCfg.HealthCheckPeriod
	return cp, nil
}

// poolResult is what a cancel over the cancel pool came to.
type poolResult int

const (
	// poolNotSent: nothing was sent (busy, unreachable, skipped), or the
	// server refused the query: nothing can arrive late; fall back.
	poolNotSent poolResult = iota
	// poolHidden: the backend exists but its identity is not visible to the
	// cancel role; nothing was signalled; fall back.
	poolHidden
	// poolSignalled: the backend was signalled.
	poolSignalled
	// poolNotFound: no backend with that identity exists; nothing was
	// signalled.
	poolNotFound
	// poolUnknown: the query was sent and its answer did not come back: the
	// signal may still happen.
	poolUnknown
)

// viaPool runs the cancel query over the cancel pool for the backend pid
// that started at backendStart (unix microseconds).
func (c *canceller) viaPool(ctx context.Context, pid uint32, backendStart int64) poolResult {
	if time.Now().UnixNano() < c.unhealthyUntil.Load() {
		return poolNotSent
	}
	share := c.grace / cancelPoolAcquireShare
	if share <= 0 {
		share = defaultCancelGrace / cancelPoolAcquireShare // CancelGrace off: still not worth waiting long
	}
	actx, cancel := context.WithTimeout(ctx, share)
	conn, err := c.pool.Acquire(actx)
	cancel()
	if err != nil {
		c.stats.poolErrors.Add(1)
		if actx.Err() == nil {
			// Not a full pool: the cancel pool cannot connect.
			c.markUnhealthy()
		}
		return poolNotSent
	}
	defer conn.Release()
	var visible, signalled bool
	err = conn.QueryRow(ctx, cancelSQL, pgx.QueryExecModeExec, int64(pid), time.UnixMicro(backendStart)).Scan(&visible, &signalled)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		c.stats.notFound.Add(1)
		return poolNotFound
	case err == nil && !visible:
		return poolHidden
	case err == nil && signalled:
		c.stats.signalled.Add(1)
		return poolSignalled
	case err == nil:
		// A visible backend with another start time: the pid was recycled,
		// and that stranger's statement was not touched.
		c.stats.notFound.Add(1)
		return poolNotFound
	case errors.As(err, &pgErr) && pgErr.Code != pgerrcode.QueryCanceled && !endsSession(pgErr):
		// The server refused the query (not allowed to cancel, say):
		// nothing was signalled, and the next cancel would fare the same.
		c.stats.poolErrors.Add(1)
		c.markUnhealthy()
		return poolNotSent
	case pgconn.SafeToRetry(err):
		c.stats.poolErrors.Add(1)
		return poolNotSent
	}
	c.stats.poolErrors.Add(1)
	if ctx.Err() == nil {
		// Not a slow answer: the cancel pool's connection broke.
		c.markUnhealthy()
	}
	return poolUnknown
}

func (c *canceller) markUnhealthy() {
	c.unhealthyUntil.Store(time.Now().Add(poolUnhealthyFor).UnixNano())
}
