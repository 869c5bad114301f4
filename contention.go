package pgtx

import (
	"context"
	"time"

	"github.com/pgtx-go/pgtx/internal/contention"
)

const defaultContentionThreshold = 0.1

// ContentionConfig configures a pool's contention manager, on by default.
// When more than Threshold of an [Options].Label's attempts fail with a
// conflict, the manager lets only as many of them run at once as commit
// most; the others wait in the client, holding no connection, within the
// call's deadline and [Config].AcquireTimeout. See the [hot rows guide].
//
// [hot rows guide]: https://github.com/pgtx-go/pgtx/blob/main/docs/hot-rows.md
type ContentionConfig struct {
	// Threshold is the share of a label's attempts failing with a conflict
	// above which the gate limits them. Default 0.1; above 1 is an error;
	// negative: the manager is off.
	Threshold float64
}

func (c ContentionConfig) validate() error {
	if c.Threshold != c.Threshold || c.Threshold > 1 {
		return invalidArg("ContentionConfig: Threshold must be a number no greater than 1")
	}
	return nil
}

// ContentionStats is the state of the contention manager for one label.
type ContentionStats struct {
	Label string
	// Limiting reports whether the gate limits the label now, to Limit.
	Limiting bool
	Limit    int
	// Running and Waiting count attempts running and waiting at the gate.
	Running int
	Waiting int
	// AttemptCount counts attempts, ConflictCount and CommitCount outcomes.
	AttemptCount  int64
	ConflictCount int64
	CommitCount   int64
	// Wait is the distribution of the waits at the gate.
	Wait Histogram
}

// ContentionTracer is an optional interface of a [Config].Tracer, told
// whenever the contention manager changes a label's limit.
type ContentionTracer interface {
	TraceContention(ctx context.Context, data TraceContentionData)
}

// TraceContentionData describes a change of a label's limit.
type TraceContentionData struct {
	Label string
	// Limiting reports whether the gate limits the label, to Limit;
	// Previous is the old limit.
	Limiting bool
	Limit    int
	Previous int
	// ConflictRatio is the conflict share that led to the change.
	ConflictRatio float64
}

func newContention(cfg ContentionConfig, c clock, maxConns int, acquireTimeout time.Duration, tracer TransactionTracer) *contention.Manager {
	if cfg.Threshold < 0 {
		return nil
	}
	return contention.New(contentionSettings(cfg, c, maxConns, acquireTimeout, tracer))
}

func contentionSettings(cfg ContentionConfig, c clock, maxConns int, acquireTimeout time.Duration, tracer TransactionTracer) contention.Settings {
	s := contention.Settings{Clock: c, Threshold: defaultOrNone(cfg.Threshold, defaultContentionThreshold),
		MaxLimit: max(maxConns, 1), AcquireTimeout: acquireTimeout}
	if acquireTimeout > 0 {
		s.AcquireTimeoutErr = &acquireTimeoutError{timeout: acquireTimeout}
	}
	if ct, ok := tracer.(ContentionTracer); ok {
		s.OnLimit = func(ctx context.Context, label string, limiting bool, limit, previous int, ratio float64) {
			ct.TraceContention(ctx, TraceContentionData{Label: label, Limiting: limiting,
				Limit: limit, Previous: previous, ConflictRatio: ratio})
		}
	}
	return s
}

func contentionStats(m *contention.Manager) []ContentionStats {
	in := m.Stats()
	out := make([]ContentionStats, len(in))
	for i, s := range in {
		out[i] = ContentionStats{Label: s.Label, Limiting: s.Limiting, Limit: s.Limit,
			Running: s.Running, Waiting: s.Waiting,
			AttemptCount: s.Attempts, ConflictCount: s.Conflicts, CommitCount: s.Commits,
			Wait: Histogram(s.Wait)}
	}
	return out
}
