package pgtx

import (
	"context"
	"errors"
	"strconv"
	"time"

	// Imported as circuit: breaker names the Pool's adapter below.
	circuit "github.com/pgtx-go/pgtx/internal/breaker"
)

// ErrCircuitOpen is matched (errors.Is) by the error of a call an open
// circuit breaker refused, without I/O, until OpenFor has passed.
var ErrCircuitOpen = errors.New("pgtx: circuit breaker is open")

// BreakerState is the state of a circuit breaker.
type BreakerState int

// The states of a circuit breaker.
const (
	// BreakerClosed lets every call through and counts their outcomes.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen lets [BreakerConfig].HalfOpenProbes calls through.
	BreakerHalfOpen
	// BreakerOpen refuses every call with [ErrCircuitOpen].
	BreakerOpen
)

// String returns the state's name.
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half-open"
	case BreakerOpen:
		return "open"
	}
	return "BreakerState(" + strconv.Itoa(int(s)) + ")"
}

// Defaults of BreakerConfig.
const (
	defaultBreakerConsecutiveFailures = 5
	defaultBreakerFailureRatio        = 0.5
	defaultBreakerSlowCallRatio       = 0.5
	defaultBreakerSlowCallThreshold   = time.Second
	defaultBreakerMinCalls            = 10
	defaultBreakerWindow              = 10 * time.Second
	defaultBreakerOpenFor             = 5 * time.Second
	defaultBreakerHalfOpenProbes      = 1
)

// BreakerConfig configures a circuit breaker for a database the application
// can do without (a read replica), never the primary. The caller's own
// cancellation, conflicts and permanent errors are not counted. See the
// [breakers guide].
//
// [breakers guide]: https://github.com/pgtx-go/pgtx/blob/main/docs/replicas-breakers-bulkheads.md
type BreakerConfig struct {
	// Name names the breaker in events and statistics.
	Name string
	// ConsecutiveFailures opens the breaker after that many failures in a
	// row. Default 5; negative: the rule is off.
	ConsecutiveFailures int
	// FailureRatio opens the breaker when at least that share of the calls
	// in the window failed. Default 0.5; negative: the rule is off.
	FailureRatio float64
	// SlowCallRatio opens the breaker when at least that share of the calls
	// in the window were slow. Default 0.5; negative: the rule is off.
	SlowCallRatio float64
	// SlowCallThreshold is the duration from which a call counts as slow,
	// 2-3x the normal latency. Default 1s; negative: none is.
	SlowCallThreshold time.Duration
	// MinCalls is how many calls the window must hold before the ratio
	// rules apply. Default 10; negative: no minimum.
	MinCalls int
	// Window is how far back the ratio rules look. Default 10s; negative:
	// no window, and the two ratio rules are off.
	Window time.Duration
	// OpenFor is how long the breaker stays open before it lets probes
	// through. Default 5s; negative: no wait, the next call is a probe.
	OpenFor time.Duration
	// HalfOpenProbes is how many calls the half-open breaker lets through.
	// Default 1; negative: it closes once OpenFor has passed.
	HalfOpenProbes int
	// Tracer, when set, receives the breaker's state changes, as does the
	// pool's [Config].Tracer when it implements [BreakerTracer].
	Tracer BreakerTracer
}

func (c BreakerConfig) validate() error {
	if c.FailureRatio > 1 || c.SlowCallRatio > 1 || c.FailureRatio != c.FailureRatio || c.SlowCallRatio != c.SlowCallRatio {
		return invalidArg("BreakerConfig: FailureRatio and SlowCallRatio must be at most 1")
	}
	return nil
}

// BreakerTracer receives a circuit breaker's state changes.
type BreakerTracer interface {
	// TraceBreakerStateChange is called after the breaker changed state,
	// with the context of the call that changed it, if any.
	TraceBreakerStateChange(ctx context.Context, data TraceBreakerStateChangeData)
}

// TraceBreakerStateChangeData describes a state change.
type TraceBreakerStateChangeData struct {
	Name     string
	From, To BreakerState
	// Reason says which rule opened the breaker, or why it closed.
	Reason string
	// Calls, Failures and Slow are the window's counts at the change.
	Calls, Failures, Slow int64
}

// BreakerStats is a snapshot of a pool's circuit breaker.
type BreakerStats struct {
	Name  string
	State BreakerState
	// CallCount, FailureCount and SlowCount count the current window.
	CallCount, FailureCount, SlowCount int64
	// RejectedCount counts refused calls, OpenedCount the times it opened.
	RejectedCount, OpenedCount int64
}

// breaker is the circuit breaker of a Pool.
type breaker struct {
	name    string
	tracers []BreakerTracer // none: no one to report to
	cb      *circuit.Breaker
}

// newBreaker tells a tracer that is both cfg.Tracer and the pool's once.
func newBreaker(cfg *BreakerConfig, tracer TransactionTracer, clk clock) *breaker {
	if cfg == nil {
		return nil
	}
	b := &breaker{name: cfg.Name}
	pool, _ := tracer.(BreakerTracer)
	for _, t := range [...]BreakerTracer{cfg.Tracer, pool} {
		if t != nil && (len(b.tracers) == 0 || !same(b.tracers[0], t)) {
			b.tracers = append(b.tracers, t)
		}
	}
	s := breakerSettings(*cfg)
	if len(b.tracers) > 0 {
		s.OnChange = b.report
	}
	b.cb = circuit.New(s, clk)
	return b
}

func breakerSettings(cfg BreakerConfig) circuit.Settings {
	s := circuit.Settings{
		ConsecutiveFailures: defaultOrNone(cfg.ConsecutiveFailures, defaultBreakerConsecutiveFailures),
		FailureRatio:        defaultOrNone(cfg.FailureRatio, defaultBreakerFailureRatio),
		SlowCallRatio:       defaultOrNone(cfg.SlowCallRatio, defaultBreakerSlowCallRatio),
		SlowCallThreshold:   defaultOrNone(cfg.SlowCallThreshold, defaultBreakerSlowCallThreshold),
		MinCalls:            defaultOrNone(cfg.MinCalls, defaultBreakerMinCalls),
		// The window still counts, for Stats, when the ratio rules are
		// off; a tenth of the default is its narrowest.
		Window:         max(defaultOrNone(cfg.Window, defaultBreakerWindow), defaultBreakerWindow/10),
		OpenFor:        defaultOrNone(cfg.OpenFor, defaultBreakerOpenFor),
		HalfOpenProbes: defaultOrNone(cfg.HalfOpenProbes, defaultBreakerHalfOpenProbes),
		Judge:          judgeBreakerCall,
		ErrOpen:        ErrCircuitOpen,
	}
	if cfg.Window < 0 {
		s.FailureRatio, s.SlowCallRatio = 0, 0
	}
	return s
}

// judgeBreakerCall does not count a nested breaker's refusal either.
func judgeBreakerCall(ctx context.Context, err error) (counted, failed bool) {
	if errors.Is(err, ErrCircuitOpen) || (errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled)) {
		return false, false
	}
	switch Classify(err) {
	case ClassConflict, ClassPermanent:
		return false, false
	case ClassConnectionLost, ClassAmbiguous, ClassOverload, ClassUnavailable, ClassTimeout:
		return true, true
	}
	return true, false
}

func (b *breaker) do(ctx context.Context, fn func(ctx context.Context) error) error {
	return b.cb.Do(ctx, fn)
}

func (b *breaker) State() BreakerState { return breakerState(b.cb.State()) }

func (b *breaker) stats() BreakerStats {
	s := b.cb.Stats()
	return BreakerStats{
		Name: b.name, State: breakerState(s.State),
		CallCount: s.Calls, FailureCount: s.Failures, SlowCount: s.Slow,
		RejectedCount: s.Rejected, OpenedCount: s.Opened,
	}
}

func (b *breaker) report(ctx context.Context, c circuit.Change) {
	d := TraceBreakerStateChangeData{
		Name: b.name, From: breakerState(c.From), To: breakerState(c.To), Reason: c.Reason,
		Calls: c.Calls, Failures: c.Failures, Slow: c.Slow,
	}
	for _, t := range b.tracers {
		t.TraceBreakerStateChange(ctx, d)
	}
}

// breakerState relies on the two enums listing the states in one order.
func breakerState(s circuit.State) BreakerState { return BreakerState(s) }

// same takes tracers of a type that cannot be compared as different.
func same(a, b BreakerTracer) (eq bool) {
	defer func() {
		if recover() != nil {
			eq = false
		}
	}()
	return a == b
}
