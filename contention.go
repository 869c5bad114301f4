package pgtx

import (
	"context"
	"sort"
	"sync"
	"time"
)

// The defaults and constants of the contention manager.
const (
	defaultContentionThreshold = 0.1
	// contentionWindow is the number of attempts in one measurement.
	contentionWindow = 50
	// contentionWindowAttempts is how many mean attempt times a
	// measurement lasts at least: long enough for the slow attempts (a
	// deadlock found after deadlock_timeout, a lock wait) to end within
	// it, instead of only the quick ones.
	contentionWindowAttempts = 10
	// contentionOpenWindow is the number of attempts over which an open
	// gate compares its conflict ratio with the threshold: long enough that
	// a chance burst of conflicts on rows that are not hot (2% of 1,000
	// accounts' transfers conflict) does not engage it.
	contentionOpenWindow = 4 * contentionWindow
	// contentionProbeEvery is how many measurements are taken at the best
	// limit between two probes of a neighbouring one.
	contentionProbeEvery = 4
	// maxContentionProbeEvery is where that interval stops growing while
	// probes both ways lose.
	maxContentionProbeEvery = 16
	// contentionSmoothing weighs a new measurement of a limit against the
	// ones before it.
	contentionSmoothing = 0.5
	// contentionCalmMargin is how much less a probe up may seem to commit,
	// within the noise of one measurement, and still win when its attempts
	// hardly conflicted.
	contentionCalmMargin = 0.9
	// contentionStarving is the number of conflicts in a row after which a
	// call's retry runs alone while the gate limits.
	contentionStarving = 3
	// maxContentionLabels bounds the labels managed apart; calls with any
	// further label share the gate of the empty label.
	maxContentionLabels = 256
)

// ContentionConfig configures a pool's contention manager
// ([Config].Contention). The zero value is the default: on, with Threshold
// 0.1.
//
// The manager keeps, for every [Options].Label (the empty label is one),
// the share of attempts that fail with a conflict (40001, 40P01). While it
// stays at or below Threshold, an attempt pays four atomic additions (a
// count of those running, and of attempts and commits) and nothing
// else. Above it, the label's attempts pass through a gate that lets a
// limited number run at once: the others wait in the client, holding no
// connection, and are let in oldest call first as running attempts end, so
// a retry after a conflict runs as soon as the transaction it lost to has
// finished instead of after a blind pause; a call that lost three times in
// a row runs alone, so that it commits. The limit is the one that
// commits most: over each measurement (at least 50 attempts and ten mean
// attempt times, so that a deadlock found only after deadlock_timeout
// counts) the gate takes the label's commits per second while its
// attempts ran, and now and then tries half as many or half as many again,
// keeping whichever commits more. It starts limiting only after the
// threshold was passed over 200 attempts, and opens again when its limit
// is no longer reached, or is the pool's size, and conflicts have fallen.
//
// The overload rules of [RetryConfig] (backoff, caps, the budget) are
// unchanged. A wait at the gate counts against the call's deadline: it ends
// when an attempt admitted at that point could no longer finish in time (by
// the label's mean attempt time), and against [Config].AcquireTimeout, as a
// wait for a connection would.
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
		return &invalidArgError{msg: "ContentionConfig: Threshold must be a number no greater than 1"}
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

// contention is a pool's contention manager: one gate per label.
type contention struct {
	clock          clock
	threshold      float64
	maxLimit       int
	acquireTimeout time.Duration // 0: none
	tracer         ContentionTracer

	def    gate
	mu     sync.Mutex // guards adding to labels
	labels sync.Map   // string -> *gate
	count  int        // labels stored, under mu
}

// newContention returns the manager of a pool, or nil when it is off.
func newContention(cfg ContentionConfig, c clock, maxConns int, acquireTimeout time.Duration, tracer TransactionTracer) *contention {
	if cfg.Threshold < 0 {
		return nil
	}
	m := &contention{clock: c, threshold: defaultOrNone(cfg.Threshold, defaultContentionThreshold),
		maxLimit: max(maxConns, 1), acquireTimeout: acquireTimeout}
	m.tracer, _ = tracer.(ContentionTracer)
	m.def.m = m
	return m
}

// gate returns the gate of label.
func (m *contention) gate(label string) *gate {
	if label == "" {
		return &m.def
	}
	if g, ok := m.labels.Load(label); ok {
		return g.(*gate)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if g, ok := m.labels.Load(label); ok {
		return g.(*gate)
	}
	if m.count >= maxContentionLabels {
		return &m.def
	}
	g := &gate{m: m, label: label}
	m.labels.Store(label, g)
	m.count++
	return g
}

// stats returns the state of every label, the empty label first.
func (m *contention) stats() []ContentionStats {
	out := []ContentionStats{m.def.stats()}
	m.labels.Range(func(_, v any) bool {
		out = append(out, v.(*gate).stats())
		return true
	})
	sort.Slice(out[1:], func(i, j int) bool { return out[1+i].Label < out[1+j].Label })
	return out
}

// close opens every gate and lets every waiter in: their attempts then
// fail on the closed pool.
func (m *contention) close() {
	m.def.open()
	m.labels.Range(func(_, v any) bool {
		v.(*gate).open()
		return true
	})
}
