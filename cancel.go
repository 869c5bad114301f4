package pgtx

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/cancel"
	"github.com/pgtx-go/pgtx/internal/histogram"
	"github.com/pgtx-go/pgtx/internal/params"
)

// CancelMode is how a statement is stopped when its context ends.
type CancelMode int

const (
	// CancelModePool (the default) sends pg_cancel_backend(pid) over a small
	// dedicated cancel pool and waits for its answer before the connection
	// runs anything else or goes back to the pool. The statement stops on
	// the server at once (its locks are released now), the call gets 57014
	// back, and the connection is kept: no reconnect per timeout. The
	// backend is matched by pid and backend_start, so a recycled pid is
	// never signalled.
	//
	// The cancel pool's role must be allowed to cancel the main role's
	// backends (the same role, a member of it, or a member of
	// pg_signal_backend, which cannot cancel a superuser's) and to see their
	// backend_start in pg_stat_activity (the same role, a member of it, or
	// a member of pg_read_all_stats). When it cannot see the identity, or
	// cannot connect, may not cancel, or is busy, that cancel goes as the
	// protocol cancel request ([CancelModeProtocol]). So does every cancel of
	// a connection that does not reach its backend directly: pgtx compares,
	// when the connection is made, the pid the server reports for the
	// session with the one the connection was given, and behind a pooler
	// such as PgBouncer they differ.
	CancelModePool CancelMode = iota

	// CancelModeProtocol sends the wire protocol's CancelRequest (on a new
	// connection, with the backend's secret key, as libpq's PQcancel) and
	// waits until the server, or the pooler in front of it, acknowledges it
	// by closing that connection. It needs no privilege and no cancel pool,
	// and works behind PgBouncer, which routes cancel requests to the right
	// server connection. The connection is kept.
	CancelModeProtocol

	// CancelModeClose closes the connection at once, as pgx does by default
	// (pgx then sends a protocol cancel request in the background, without
	// waiting for it): the call returns soonest, but the pool pays a
	// reconnect for every cancelled statement, which under a timeout storm
	// becomes a reconnect storm.
	CancelModeClose
)

// In every mode a connection whose cancel is not confirmed finished (the
// cancel pool's answer or the protocol's acknowledgement did not arrive
// within Config.CancelGrace) is destroyed, never reused: the cancel may
// still arrive and would cancel the next borrower's statement.

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
	defaultCancelGrace          = 2 * time.Second
	defaultCancelConnectTimeout = time.Second
)

// canceller is the pool-wide state of cancellation: internal/cancel's
// Canceller with the cancel pool it owns, the latency histogram of
// [CancelStats], and the pool's [CancelTracer].
type canceller struct {
	c       *cancel.Canceller
	mode    CancelMode
	resolve bool          // resolution is on: prepare connections for it
	pool    *pgxpool.Pool // CancelModePool only
	latency histogram.Live
	tracer  CancelTracer // nil: no events
}

// newCanceller builds the canceller for a main pool config. It opens the
// cancel pool (lazily connecting, one connection kept warm) in
// CancelModePool. resolve says that the pool resolves lost COMMITs, so
// its connections capture what that needs when they are made.
func newCanceller(ctx context.Context, cfg *Config, mainCfg *pgxpool.Config, resolve bool) (*canceller, error) {
	c := &canceller{mode: cfg.CancelMode, resolve: resolve}
	c.tracer, _ = cfg.Tracer.(CancelTracer)
	s := cancel.Settings{
		Mode:         cancelMode(cfg.CancelMode),
		Grace:        defaultOrNone(cfg.CancelGrace, defaultCancelGrace),
		DefaultGrace: defaultCancelGrace,
		Finished:     c.finished,
	}
	if c.mode == CancelModePool {
		cp, err := cancelPoolConfig(cfg, mainCfg)
		if err != nil {
			return nil, err
		}
		if c.pool, err = newPgxpool(ctx, cp); err != nil {
			return nil, fmt.Errorf("pgtx: cancel pool: %w", err)
		}
		s.Pool = cancel.PgxPool(c.pool)
	}
	c.c = cancel.New(s, realClock{})
	return c, nil
}

// cancelPoolConfig derives the cancel pool's config from the main one
// ([cancel.PoolConfig]), from the caller's ConnConfig (before pgtx
// installed its handler) or CancelConnString. Its sessions get a
// statement_timeout of the grace, unless Config.StatementTimeout is
// negative (which also tells pgtx to send no startup parameter a pooler
// would refuse).
func cancelPoolConfig(cfg *Config, mainCfg *pgxpool.Config) (*pgxpool.Config, error) {
	s := cancel.PoolSettings{
		ConnConfig:     cfg.ConnConfig,
		BeforeConnect:  cfg.BeforeConnect,
		ConnString:     cfg.CancelConnString,
		ConnectTimeout: defaultOrNone(cfg.CancelConnectTimeout, defaultCancelConnectTimeout),
		SessionParams:  params.AskUTF8,
		Main:           mainCfg,
	}
	if grace := defaultOrNone(cfg.CancelGrace, defaultCancelGrace); cfg.StatementTimeout >= 0 && grace > 0 {
		s.StatementTimeoutMillis = params.Millis(grace)
	}
	return cancel.PoolConfig(s)
}

// cancelMode converts a mode to internal/cancel's: the two enums list the
// modes in the same order (TestCancelModesMatch).
func cancelMode(m CancelMode) cancel.Mode { return cancel.Mode(m) }

// close waits for in-flight cancels (each bounded by the grace), then closes
// the cancel pool.
func (c *canceller) close() {
	c.c.Wait()
	if c.pool != nil {
		c.pool.Close()
	}
}

// finished records a finished cancellation's latency and reports it to the
// tracer.
func (c *canceller) finished(ctx context.Context, r cancel.Result) {
	c.latency.Observe(r.Latency)
	if c.tracer != nil {
		c.tracer.TraceCancel(ctx, TraceCancelData{PID: r.PID, Mode: c.mode, Closed: r.Outcome == cancel.Closed, NotFound: r.Outcome == cancel.NotFound,
			FellBack: r.FellBack, Latency: r.Latency})
	}
}

// stats returns a snapshot of the cancellation counters.
func (c *canceller) stats() CancelStats {
	n := c.c.Counts()
	return CancelStats{
		SentCount: n.Sent, SignalledCount: n.Signalled, NotFoundCount: n.NotFound,
		PoolErrorCount: n.PoolErrors, ProtocolCount: n.Protocol, ClosedCount: n.Closed,
		Latency: Histogram(c.latency.Snapshot()),
	}
}
