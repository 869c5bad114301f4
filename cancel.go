package pgtx

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/cancel"
	"github.com/pgtx-go/pgtx/internal/params"
)

// CancelMode is how a statement is stopped when its context ends.
type CancelMode int

const (
	// CancelModePool (the default) sends pg_cancel_backend(pid) over a small
	// dedicated cancel pool and waits for its answer before the connection
	// runs anything else or goes back to the pool: the statement stops on
	// the server at once, and the connection is kept. The backend is matched
	// by pid and backend_start, so a recycled pid is never signalled.
	//
	// The cancel pool's role must be allowed to cancel the main role's
	// backends and to see their backend_start (the same role, a member of
	// it, or a member of pg_signal_backend and pg_read_all_stats). When it
	// cannot, or cannot connect, or is busy, and for every connection that
	// does not reach its backend directly (behind PgBouncer, detected when
	// the connection is made), the cancel goes as [CancelModeProtocol].
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

// newCanceller opens the pool's [cancel.Canceller] for a main pool config
// ([cancel.Open]): in CancelModePool with its cancel pool (lazily
// connecting, one connection kept warm). The pool's [CancelTracer], if
// any, receives every finished cancellation.
func newCanceller(ctx context.Context, cfg *Config, mainCfg *pgxpool.Config) (*cancel.Canceller, error) {
	s := cancel.Settings{
		Mode:         cancelMode(cfg.CancelMode),
		Grace:        defaultOrNone(cfg.CancelGrace, defaultCancelGrace),
		DefaultGrace: defaultCancelGrace,
		Finished:     cancelTracing(cfg.Tracer, cfg.CancelMode),
	}
	return cancel.Open(ctx, s, cancelPoolSettings(cfg, mainCfg), realClock{})
}

// cancelPoolSettings resolves the cancel pool's settings
// ([cancel.PoolConfig]): the caller's ConnConfig (before pgtx installed
// its handler) or CancelConnString. Its sessions get a statement_timeout
// of the grace, unless Config.StatementTimeout is negative (which also
// tells pgtx to send no startup parameter a pooler would refuse).
func cancelPoolSettings(cfg *Config, mainCfg *pgxpool.Config) cancel.PoolSettings {
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
	return s
}

// cancelMode converts a mode to internal/cancel's: the two enums list the
// modes in the same order (TestCancelModesMatch).
func cancelMode(m CancelMode) cancel.Mode { return cancel.Mode(m) }

// cancelTracing returns what reports a finished cancellation of mode m to
// tracer, or nil when tracer is not a [CancelTracer].
func cancelTracing(tracer TransactionTracer, m CancelMode) func(context.Context, cancel.Result) {
	ct, ok := tracer.(CancelTracer)
	if !ok {
		return nil
	}
	return func(ctx context.Context, r cancel.Result) {
		ct.TraceCancel(ctx, TraceCancelData{PID: r.PID, Mode: m, Closed: r.Outcome == cancel.Closed, NotFound: r.Outcome == cancel.NotFound,
			FellBack: r.FellBack, Latency: r.Latency})
	}
}

// cancelStats returns a snapshot of c's counters.
func cancelStats(c *cancel.Canceller) CancelStats {
	n := c.Counts()
	return CancelStats{
		SentCount: n.Sent, SignalledCount: n.Signalled, NotFoundCount: n.NotFound,
		PoolErrorCount: n.PoolErrors, ProtocolCount: n.Protocol, ClosedCount: n.Closed,
		Latency: Histogram(c.Latency()),
	}
}
