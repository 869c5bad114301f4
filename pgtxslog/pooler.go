package pgtxslog

import (
	"context"
	"log/slog"

	"github.com/pgtx-go/pgtx/pooler"
)

// TracePooler logs the pooler a pool found in front of its server: as
// [PoolerSetting], each of its settings that a guarantee of pgtx's needs
// otherwise (the setting, its value, the value pgtx needs and why), or, as
// [PoolerFound], the pooler alone when none is.
func (t *Tracer) TracePooler(ctx context.Context, data pooler.Data) {
	found := []slog.Attr{slog.String("pooler", data.Name), slog.String("version", data.Version)}
	if len(data.Advice) == 0 {
		if logger, level := t.enabled(ctx, PoolerFound); logger != nil {
			write(ctx, logger, level, PoolerFound, nil, found)
		}
		return
	}
	logger, level := t.enabled(ctx, PoolerSetting)
	if logger == nil {
		return
	}
	for _, a := range data.Advice {
		write(ctx, logger, level, PoolerSetting, nil, append(found[:2:2],
			slog.String("setting", a.Setting),
			slog.String("value", a.Value),
			slog.String("want", a.Want),
			slog.String("why", a.Why)))
	}
}
