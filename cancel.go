package pgtx

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/cancel"
	"github.com/pgtx-go/pgtx/internal/params"
)

// CancelMode is how a statement is stopped when its context ends. In every
// mode a connection whose cancel is not confirmed finished within
// [Config].CancelGrace is closed, never reused. See the
// [cancellation guide].
//
// [cancellation guide]: https://github.com/pgtx-go/pgtx/blob/main/docs/cancellation.md
type CancelMode int

const (
	// CancelModePool (the default) sends pg_cancel_backend(pid) over a
	// small cancel pool and waits for its answer; the connection is kept.
	// Its role must be allowed to cancel the main role's backends (the
	// same role, or pg_signal_backend and pg_read_all_stats); where it
	// cannot, and behind PgBouncer, the cancel goes as [CancelModeProtocol].
	CancelModePool CancelMode = iota

	// CancelModeProtocol sends the wire protocol's CancelRequest, as
	// libpq's PQcancel, and waits for its acknowledgement; the connection
	// is kept. It needs no privilege and works behind PgBouncer.
	CancelModeProtocol

	// CancelModeClose closes the connection at once, as pgx does by
	// default: the call returns soonest, but every cancel costs a reconnect.
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
	defaultCancelGrace          = 2 * time.Second
	defaultCancelConnectTimeout = time.Second
)

// newCanceller opens the pool's canceller; yield reports that the main
// pool's server has no slot to spare, and the cancel pool then keeps no
// connection idle.
func newCanceller(ctx context.Context, cfg *Config, mainCfg *pgxpool.Config, yield func() bool) (*cancel.Canceller, error) {
	s := cancel.Settings{
		Mode:         cancelMode(cfg.CancelMode),
		Grace:        defaultOrNone(cfg.CancelGrace, defaultCancelGrace),
		DefaultGrace: defaultCancelGrace,
		Finished:     cancelTracing(cfg.Tracer, cfg.CancelMode),
	}
	ps := cancelPoolSettings(cfg, mainCfg)
	ps.Slots = slotSettings(0, cfg.Tracer, true, cfg.Retry.withDefaults().Jitter)
	ps.Yield = yield
	return cancel.Open(ctx, s, ps, realClock{})
}

// cancelPoolSettings gives the cancel pool's sessions a statement_timeout
// of the grace, unless a negative StatementTimeout says a pooler would
// refuse the startup parameter.
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

// cancelMode relies on the two enums listing the modes in one order.
func cancelMode(m CancelMode) cancel.Mode { return cancel.Mode(m) }

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

func cancelStats(c *cancel.Canceller) CancelStats {
	n := c.Counts()
	return CancelStats{
		SentCount: n.Sent, SignalledCount: n.Signalled, NotFoundCount: n.NotFound,
		PoolErrorCount: n.PoolErrors, ProtocolCount: n.Protocol, ClosedCount: n.Closed,
		Latency: Histogram(c.Latency()),
	}
}
