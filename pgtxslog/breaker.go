package pgtxslog

import (
	"context"
	"log/slog"

	"github.com/pgtx-go/pgtx"
)

// TraceBreakerStateChange logs a circuit breaker's change of state: as
// [BreakerOpened] when it opened, as [BreakerChanged] otherwise.
func (t *Tracer) TraceBreakerStateChange(ctx context.Context, data pgtx.TraceBreakerStateChangeData) {
	e := BreakerChanged
	if data.To == pgtx.BreakerOpen {
		e = BreakerOpened
	}
	logger, level := t.enabled(ctx, e)
	if logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 7)
	if data.Name != "" {
		attrs = append(attrs, slog.String("breaker", data.Name))
	}
	attrs = append(attrs,
		slog.String("from", data.From.String()),
		slog.String("to", data.To.String()),
		slog.String("reason", data.Reason),
		slog.Int64("calls", data.Calls),
		slog.Int64("failures", data.Failures),
		slog.Int64("slow", data.Slow))
	write(ctx, logger, level, e, nil, attrs)
}
