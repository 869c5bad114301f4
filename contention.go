package pgtx

import (
	"context"
	"time"

	"github.com/pgtx-go/pgtx/internal/contention"
)

// defaultContentionThreshold is the default [ContentionConfig].Threshold.
const defaultContentionThreshold = 0.1

// ContentionConfig configures a pool's contention manager
// ([Config].Contention). The zero value is the default: on, with Threshold
// 0.1.
//
// The manager keeps, for every [Options].Label, the share of attempts that
// fail with a conflict (40001, 40P01). While it stays at or below
// Threshold, an attempt pays four atomic additions. Above it, the label's
// attempts pass through a gate that lets as many run at once as commit
// most: the others wait in the client, holding no connection, oldest call
// first, and a retry after a conflict runs as soon as the transaction it
// lost to has finished instead of after a blind pause. A wait at the gate
// counts against the call's deadline and [Config].AcquireTimeout. The
// guide docs/hot-rows.md says how the limit is found and measured.
type ContentionConfig struct {
	// Threshold is the share of a label's attempts failing with a conflict
	// above which the gate limits them. Default 0.1; above 1 or not a
	// number is an error; negative: the manager is off, and a conflict
	// retry always waits its [RetryConfig] backoff.
	Threshold float64
}

// validate reports a ContentionConfig that cannot be applied.
func (c ContentionConfig) validate() error {
	if c.Threshold != c.Threshold || c.Threshold > 1 {
		return &invalidArgError{Msg: "ContentionConfig: Threshold must be a number no greater than 1"}
	}
	return nil
}

// ContentionStats is the state of the contention manager for one label.
type ContentionStats struct {
	Label string
	// Limiting reports whether the gate limits the label's attempts now,
	// and Limit to how many at once (0 while it does not).
	Limiting bool
	Limit    int
	// Running is the number of the label's attempts running now, and
	// Waiting the number waiting at the gate.
	Running int
	Waiting int
	// AttemptCount, ConflictCount and CommitCount count the label's
	// attempts, those that failed with a conflict, and those that
	// committed.
	AttemptCount  int64
	ConflictCount int64
	CommitCount   int64
	// Wait is the distribution of the waits at the gate.
	Wait Histogram
}

// ContentionTracer is an optional interface of a [Config].Tracer: it
// receives an event whenever the contention manager starts limiting a
// label, changes its limit, or stops limiting it.
type ContentionTracer interface {
	TraceContention(ctx context.Context, data TraceContentionData)
}

// TraceContentionData describes a change of a label's limit.
type TraceContentionData struct {
	Label string
	// Limiting reports whether the gate limits the label from now on;
	// Limit is the new limit (0 when it does not) and Previous the old one.
	Limiting bool
	Limit    int
	Previous int
	// ConflictRatio is the share of the label's attempts that failed with
	// a conflict in the measurement that led to the change.
	ConflictRatio float64
}

// newContention returns the contention manager of a pool, or nil when it
// is off.
func newContention(cfg ContentionConfig, c clock, maxConns int, acquireTimeout time.Duration, tracer TransactionTracer) *contention.Manager {
	if cfg.Threshold < 0 {
		return nil
	}
	return contention.New(contentionSettings(cfg, c, maxConns, acquireTimeout, tracer))
}

// contentionSettings resolves cfg to the manager's settings: the default
// threshold, the pool's size as the highest limit, the acquire timeout's
// error, and the tracer's events when it is a [ContentionTracer].
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

// contentionStats returns the state of every label of m, the empty label
// first.
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
