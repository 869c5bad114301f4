package pgtxslog

import (
	"context"
	"log/slog"

	"github.com/pgtx-go/pgtx"
)

// TraceCancel logs a cancelled statement: as [Cancel] when it was
// cancelled as configured, as [CancelFallback] when the cancel pool failed
// (data.FellBack) or the connection was closed although the pool's mode is
// not [pgtx.CancelModeClose].
func (t *Tracer) TraceCancel(ctx context.Context, data pgtx.TraceCancelData) {
	e := Cancel
	if data.FellBack || (data.Closed && data.Mode != pgtx.CancelModeClose) {
		e = CancelFallback
	}
	logger, level := t.enabled(ctx, e)
	if logger == nil {
		return
	}
	write(ctx, logger, level, e, nil, []slog.Attr{
		slog.Uint64("pid", uint64(data.PID)),
		slog.String("cancel_mode", data.Mode.String()),
		slog.String("cancel_outcome", cancelOutcome(data)),
		slog.Bool("fell_back", data.FellBack),
		slog.Duration("latency", data.Latency),
	})
}

// cancelOutcome returns how a cancel ended: "signalled", "not_found",
// "protocol" or "closed".
func cancelOutcome(data pgtx.TraceCancelData) string {
	switch {
	case data.Closed:
		return "closed"
	case data.NotFound:
		return "not_found"
	case data.FellBack || data.Mode == pgtx.CancelModeProtocol:
		return "protocol"
	case data.Mode == pgtx.CancelModePool:
		return "signalled"
	}
	return "unknown"
}
