package pgtxslog

import (
	"context"
	"log/slog"

	"github.com/pgtx-go/pgtx"
)

// TraceContention logs a change of a label's limit by the contention
// manager: as [ContentionSwitched] when it starts or stops limiting the
// label, as [ContentionChanged] when it changes the limit of a label it
// keeps limiting.
func (t *Tracer) TraceContention(ctx context.Context, data pgtx.TraceContentionData) {
	e := ContentionChanged
	if !data.Limiting || data.Previous == 0 {
		e = ContentionSwitched
	}
	logger, level := t.enabled(ctx, e)
	if logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 5)
	if data.Label != "" {
		attrs = append(attrs, slog.String("label", data.Label))
	}
	attrs = append(attrs,
		slog.Bool("limiting", data.Limiting),
		slog.Int("limit", data.Limit),
		slog.Int("previous", data.Previous),
		slog.Float64("conflict_ratio", data.ConflictRatio))
	write(ctx, logger, level, e, nil, attrs)
}
