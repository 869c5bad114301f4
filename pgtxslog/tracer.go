package pgtxslog

import (
	"context"
	"log/slog"
	"maps"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/failover"
	"github.com/pgtx-go/pgtx/pooler"
	"github.com/pgtx-go/pgtx/slots"
)

// Option configures a [Tracer] made by [NewTracer]; the With functions
// make them.
type Option interface {
	apply(*Tracer)
}

// optionFunc is an Option made of a function.
type optionFunc func(*Tracer)

func (f optionFunc) apply(t *Tracer) { f(t) }

// WithLogger makes the Tracer write to logger. Without it, or with a nil
// logger, it writes to [slog.Default] at the time of each event, so a later
// [slog.SetDefault] takes effect.
func WithLogger(logger *slog.Logger) Option {
	return optionFunc(func(t *Tracer) { t.logger = logger })
}

// WithLevels sets the levels of the Tracer's lines: it maps a kind of line
// to its level. A kind that is missing, or whose level is nil, has its
// default level (see [Event]); [LevelOff] silences it. A
// level is read at each event, so a [*slog.LevelVar] changes it while the
// program runs. The map is copied; a key that is none of the kinds is
// ignored. Given more than once, each map is applied over the ones before
// it.
func WithLevels(levels map[Event]slog.Leveler) Option {
	m := maps.Clone(levels)
	return optionFunc(func(t *Tracer) {
		for e, l := range m {
			if e >= 0 && e < numEvents {
				t.levels[e] = l
			}
		}
	})
}

// Tracer logs pgtx events to a [*slog.Logger]. It implements every tracer
// interface of pgtx: [pgtx.TransactionTracer], [pgtx.CancelTracer],
// [pgtx.BreakerTracer], [pgtx.ContentionTracer], [failover.Tracer],
// [pooler.Tracer] and [slots.Tracer]; set as [pgtx.Config].Tracer it
// receives the events of the pool's calls, cancels, circuit breaker,
// contention manager, failovers, pooler and connection slots. Create it
// with [NewTracer]; the zero Tracer logs to [slog.Default] at the default
// levels. It is safe for concurrent use.
type Tracer struct {
	logger *slog.Logger            // nil: slog.Default() at each event
	levels [numEvents]slog.Leveler // nil: the kind's default level
}

var (
	_ pgtx.TransactionTracer = (*Tracer)(nil)
	_ pgtx.CancelTracer      = (*Tracer)(nil)
	_ pgtx.BreakerTracer     = (*Tracer)(nil)
	_ pgtx.ContentionTracer  = (*Tracer)(nil)
	_ failover.Tracer        = (*Tracer)(nil)
	_ pooler.Tracer          = (*Tracer)(nil)
	_ slots.Tracer           = (*Tracer)(nil)
)

// NewTracer returns a [Tracer] configured by opts (nil options are
// skipped): by default it writes to [slog.Default] at the default levels.
func NewTracer(opts ...Option) *Tracer {
	t := &Tracer{}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(t)
		}
	}
	return t
}

// enabled returns the logger to write a line of kind e to and its level,
// or a nil logger when the kind is off or its level is disabled.
func (t *Tracer) enabled(ctx context.Context, e Event) (*slog.Logger, slog.Level) {
	var logger *slog.Logger
	level := events[e].level
	if t != nil {
		logger = t.logger
		if l := t.levels[e]; l != nil {
			level = l.Level()
		}
	}
	if level == LevelOff {
		return nil, level
	}
	if logger == nil {
		logger = slog.Default()
	}
	if !logger.Enabled(ctx, level) {
		return nil, level
	}
	return logger, level
}

// write writes a line of kind e: the error (if any) under the key "err",
// then attrs as the group "pgtx".
func write(ctx context.Context, logger *slog.Logger, level slog.Level, e Event, err error, attrs []slog.Attr) {
	group := slog.Attr{Key: "pgtx", Value: slog.GroupValue(attrs...)}
	if err == nil {
		logger.LogAttrs(ctx, level, events[e].msg, group)
		return
	}
	logger.LogAttrs(ctx, level, events[e].msg, slog.Any("err", err), group)
}
