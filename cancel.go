package pgtx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CancelMode is how a statement is stopped when its context ends.
type CancelMode int

const (
	// CancelModePool (the default) sends
	// pg_cancel_backend(pid) over a small dedicated cancel pool and waits
	// for it before the connection runs anything else or goes back to the
	// pool. The statement stops on the server at once (its locks are
	// released now), the call gets 57014 back, and the connection is kept:
	// no reconnect per timeout. The backend is matched by pid and
	// backend_start, so a recycled pid is never signalled. The role needs
	// the right to cancel its own backends (the same role, or membership in
	// pg_signal_backend); when the cancel pool cannot connect or may not
	// cancel, pgtx falls back to the protocol cancel request, then to
	// closing the connection. Do not use it behind a transaction-pooling
	// PgBouncer, where a pid is the pooler's, not the session's.
	CancelModePool CancelMode = iota

	// CancelModeProtocol sends the wire protocol's CancelRequest (on a new
	// connection, with the backend's secret key, as libpq's PQcancel) and
	// waits for the server to acknowledge it before the connection is used
	// again. Use it behind PgBouncer, which routes cancel requests to the
	// right server connection. The connection is kept.
	CancelModeProtocol

	// CancelModeClose closes the connection at once, as pgx does by default
	// (pgx then sends a protocol cancel request in the background, without
	// waiting for it): the call returns soonest, but the pool pays a
	// reconnect for every cancelled statement, which under a timeout storm
	// becomes a reconnect storm.
	CancelModeClose
)

// String returns the mode's name.
func (m CancelMode) String() string {
	switch m {
	case CancelModePool:
		return "pool"
	case CancelModeProtocol:
		return "protocol"
	case CancelModeClose:
		return "close"
	}
	return fmt.Sprintf("CancelMode(%d)", int(m))
}

// Defaults of the cancellation settings of Config.
const (
	DefaultCancelGrace          = 2 * time.Second
	DefaultCancelPoolSize       = 2
	DefaultCancelConnectTimeout = time.Second
)

// cancelSQL cancels the backend only if it is still the one the connection
// was made to: a pid alone may have been recycled by a stranger's session.
const cancelSQL = "select pg_cancel_backend(pid) from pg_stat_activity where pid = $1 and backend_start = $2"

// identitySQL captures the backend identity when a connection is made.
const identitySQL = "select backend_start from pg_stat_activity where pid = pg_backend_pid()"

// customDataKey is where a connection's handler is kept in
// PgConn.CustomData, so AfterConnect can give it the backend's identity.
const customDataKey = "pgtx.cancel"

// poolUnhealthyFor is how long the cancel pool is skipped after it failed to
// connect, so a storm of cancels does not pay a connect attempt each.
const poolUnhealthyFor = time.Second

// canceller is the pool-wide state of cancellation: the mode, the cancel
// pool, the statistics, and the goroutines of in-flight cancels, which it
// owns and waits for on close.
type canceller struct {
	mode   CancelMode
	grace  time.Duration
	pool   *pgxpool.Pool // CancelModePool only
	stats  cancelCounters
	tracer CancelTracer // nil: no events

	// unhealthyUntil (unix nanoseconds) skips the cancel pool after a
	// failure to reach it.
	unhealthyUntil atomic.Int64
	wg             sync.WaitGroup
}

// newCanceller builds the canceller for a main pool config and installs its
// handler and identity capture on mainCfg. It opens the cancel pool (lazily
// connecting, one connection kept warm) in CancelModePool.
func newCanceller(ctx context.Context, cfg *Config, mainCfg *pgxpool.Config) (*canceller, error) {
	c := &canceller{mode: cfg.CancelMode, grace: durDefault(cfg.CancelGrace, DefaultCancelGrace)}
	c.tracer, _ = cfg.Tracer.(CancelTracer)
	if c.mode == CancelModePool {
		cp, err := cancelPoolConfig(cfg, mainCfg)
		if err != nil {
			return nil, err
		}
		if c.pool, err = newPgxpool(ctx, cp); err != nil {
			return nil, fmt.Errorf("pgtx: cancel pool: %w", err)
		}
		userAfterConnect := mainCfg.AfterConnect
		mainCfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			if err := captureIdentity(ctx, conn); err != nil {
				return err
			}
			if userAfterConnect != nil {
				return userAfterConnect(ctx, conn)
			}
			return nil
		}
	}
	mainCfg.ConnConfig.BuildContextWatcherHandler = func(pgConn *pgconn.PgConn) ctxwatch.Handler {
		h := &cancelHandler{c: c, pgConn: pgConn, netConn: pgConn.Conn()}
		if data := pgConn.CustomData(); data != nil {
			data[customDataKey] = h
		}
		return h
	}
	return c, nil
}

// cancelPoolConfig derives the cancel pool's config from the main one: same
// server, role and TLS, its own size and short connect timeout, a short
// statement_timeout, pgx's default context handling and none of the main
// pool's hooks.
func cancelPoolConfig(cfg *Config, mainCfg *pgxpool.Config) (*pgxpool.Config, error) {
	size := cfg.CancelPoolSize
	if size == 0 {
		size = DefaultCancelPoolSize
	}
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
	cc.ConnectTimeout = durDefault(cfg.CancelConnectTimeout, DefaultCancelConnectTimeout)
	cc.BuildContextWatcherHandler = func(pgConn *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pgConn.Conn()}
	}
	cc.Tracer = nil
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["statement_timeout"] = fmt.Sprint(durationMillis(durDefault(cfg.CancelGrace, DefaultCancelGrace)))
	delete(cc.RuntimeParams, "idle_in_transaction_session_timeout")
	if app := cc.RuntimeParams["application_name"]; app != "" {
		cc.RuntimeParams["application_name"] = app + " (pgtx cancel)"
	}
	cp.ConnConfig = cc
	cp.MaxConns = size
	cp.MinConns = 1 // kept warm: the first cancel does not pay a connect
	cp.MaxConnIdleTime = mainCfg.MaxConnIdleTime
	cp.MaxConnLifetime = mainCfg.MaxConnLifetime
	cp.HealthCheckPeriod = mainCfg.HealthCheckPeriod
	return cp, nil
}

// captureIdentity records the backend's start time on the connection's
// handler; with the pid it identifies this backend and no other.
func captureIdentity(ctx context.Context, conn *pgx.Conn) error {
	h, _ := conn.PgConn().CustomData()[customDataKey].(*cancelHandler)
	if h == nil {
		return nil
	}
	var start time.Time
	if err := conn.QueryRow(ctx, identitySQL).Scan(&start); err != nil {
		return fmt.Errorf("pgtx: capture backend identity: %w", err)
	}
	h.backendStart.Store(start.UnixMicro())
	return nil
}

// close waits for in-flight cancels (each bounded by the grace), then closes
// the cancel pool.
func (c *canceller) close() {
	c.wg.Wait()
	if c.pool != nil {
		c.pool.Close()
	}
}

// cancelHandler is the ctxwatch.Handler of one main-pool connection.
type cancelHandler struct {
	c       *canceller
	pgConn  *pgconn.PgConn
	netConn net.Conn
	// backendStart is the backend's start time in unix microseconds; 0
	// until AfterConnect captured it.
	backendStart atomic.Int64
	// done is closed when the in-flight cancel has finished; nil when none.
	done chan struct{}
}

// HandleCancel is called when the context of a running statement ends. It
// arms the grace fallback (a deadline on the socket, so the call returns even
// if the cancel never takes effect) and sends the cancel asynchronously.
func (h *cancelHandler) HandleCancel(ctx context.Context) {
	now := time.Now()
	start := h.backendStart.Load()
	if h.c.mode == CancelModeClose || (h.c.mode == CancelModePool && start == 0) {
		h.closeNow()
		h.c.finish(ctx, h.pgConn.PID(), CancelClosed, false, now)
		return
	}
	deadline := now.Add(h.c.grace)
	_ = h.netConn.SetDeadline(deadline)
	h.done = make(chan struct{})
	h.c.wg.Add(1)
	go func() {
		defer h.c.wg.Done()
		defer close(h.done)
		outcome, fellBack := h.send(deadline, start)
		h.c.finish(ctx, h.pgConn.PID(), outcome, fellBack, now)
	}()
}

// HandleUnwatchAfterCancel is called when the statement has returned. It
// waits for the in-flight cancel (bounded by the grace) so a late cancel can
// never hit the next statement, then clears the deadline.
func (h *cancelHandler) HandleUnwatchAfterCancel() {
	if h.done != nil {
		<-h.done
		h.done = nil
	}
	_ = h.netConn.SetDeadline(time.Time{})
}

// send cancels the statement: over the cancel pool, else with the protocol
// cancel request, else by closing the connection.
func (h *cancelHandler) send(deadline time.Time, backendStart int64) (outcome CancelOutcome, fellBack bool) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	h.c.stats.sent.Add(1)
	if h.c.mode == CancelModePool {
		if outcome, ok := h.c.viaPool(ctx, h.pgConn.PID(), backendStart); ok {
			return outcome, false
		}
		h.c.stats.poolErrors.Add(1)
		fellBack = true
		if ctx.Err() != nil {
			h.closeNow()
			return CancelClosed, true
		}
	}
	if err := h.pgConn.CancelRequest(ctx); err == nil {
		h.c.stats.protocol.Add(1)
		return CancelProtocol, fellBack
	}
	h.closeNow()
	return CancelClosed, true
}

// closeNow is the last fallback: the socket's deadline passes now, so the
// statement returns with a timeout and the connection is discarded.
func (h *cancelHandler) closeNow() {
	_ = h.netConn.SetDeadline(time.Now())
	h.c.stats.closed.Add(1)
}

// finish records a finished cancellation and reports it to the tracer.
func (c *canceller) finish(ctx context.Context, pid uint32, outcome CancelOutcome, fellBack bool, began time.Time) {
	latency := time.Since(began)
	c.stats.latency.observe(latency)
	if c.tracer != nil {
		c.tracer.TraceCancel(ctx, TraceCancelData{PID: pid, Mode: c.mode, Outcome: outcome, FellBack: fellBack, Latency: latency})
	}
}

// viaPool runs pg_cancel_backend over the cancel pool. ok reports that the
// cancel pool answered (the backend was signalled, or it no longer exists
// and nothing was); otherwise the caller falls back.
func (c *canceller) viaPool(ctx context.Context, pid uint32, backendStart int64) (outcome CancelOutcome, ok bool) {
	if time.Now().UnixNano() < c.unhealthyUntil.Load() {
		return 0, false
	}
	var signalled bool
	err := c.pool.QueryRow(ctx, cancelSQL, pid, time.UnixMicro(backendStart)).Scan(&signalled)
	switch {
	case err == nil && signalled:
		c.stats.signalled.Add(1)
		return CancelSignalled, true
	case err == nil || errors.Is(err, pgx.ErrNoRows):
		// The backend is gone (or was never this one): nothing to cancel,
		// and nobody else's statement was touched.
		c.stats.notFound.Add(1)
		return CancelNotFound, true
	}
	// Unreachable, refusing connections (53300), or not allowed to cancel:
	// skip the cancel pool for a moment rather than pay for it on every
	// cancel of a storm.
	c.unhealthyUntil.Store(time.Now().Add(poolUnhealthyFor).UnixNano())
	return 0, false
}
