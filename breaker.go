package pgtx

import (
	"context"
	"errors"
	"strconv"
	"time"

	// Imported as circuit: breaker names the Pool's adapter below.
	circuit "github.com/pgtx-go/pgtx/internal/breaker"
)

// ErrCircuitOpen is matched (errors.Is) by the error of a call a circuit
// breaker refused: the database behind it failed or was slow too often, and
// it gets no calls until OpenFor has passed. The refusal costs no I/O.
var ErrCircuitOpen = errors.New("pgtx: circuit breaker is open")

// BreakerState is the state of a circuit breaker, in the order a breaker
// goes through them.
type BreakerState int

// The states of a circuit breaker.
const (
	// BreakerClosed lets every call through and counts their outcomes.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen lets [BreakerConfig].HalfOpenProbes calls through to
	// decide whether to close again.
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
// can do without: a read replica (fall back to the primary), an analytics
// store. Do not put one on the primary: there is nothing to fall back to,
// and an open breaker turns "the database is slow" into "every request fails".
//
// It opens on any of three rules, each of which can be switched off: N
// consecutive failures; a failure ratio over a rolling window with a minimum
// number of calls; and a slow-call ratio over the same window, since a
// connection-timeout storm starts with slowness, not errors.
//
// Counted as failures: lost connections, ambiguous commits, overload, an
// unavailable server, statement and deadline timeouts, acquire timeouts, a
// full pool queue, and a panic in the call (as gobreaker counts it).
// Counted as slow: any counted call that took SlowCallThreshold or longer.
// Not counted at all: the caller's own cancellation (context.Canceled),
// conflicts (40001, 40P01), and permanent errors (constraint, syntax, data
// errors, the caller's own errors): they say nothing about the database's
// health.
//
// The zero value of each field means its default.
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
	// SlowCallThreshold is the duration from which a call counts as slow.
	// Size it to 2-3x the normal latency of the calls. Default 1s;
	// negative: no call counts as slow.
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
	// HalfOpenProbes is how many calls the half-open breaker lets through;
	// when all of them succeed without being slow it closes, the first that
	// fails or is slow opens it again. Default 1; negative: no probes, the
	// breaker closes once OpenFor has passed.
	HalfOpenProbes int
	// Tracer, when set, receives the breaker's state changes. The breaker
	// also reports to the pool's [Config].Tracer when that implements
	// [BreakerTracer].
	Tracer BreakerTracer
}

func (c BreakerConfig) validate() error {
	if c.FailureRatio > 1 || c.SlowCallRatio > 1 || c.FailureRatio != c.FailureRatio || c.SlowCallRatio != c.SlowCallRatio {
		return &invalidArgError{Msg: "BreakerConfig: FailureRatio and SlowCallRatio must be at most 1"}
	}
	return nil
}

// BreakerTracer receives a circuit breaker's state changes.
type BreakerTracer interface {
	// TraceBreakerStateChange is called after the breaker changed state.
	// ctx is the context of the call whose outcome changed it, or
	// context.Background when time did (open to half-open).
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
	// RejectedCount counts calls refused with [ErrCircuitOpen];
	// OpenedCount the times the breaker opened.
	RejectedCount, OpenedCount int64
}

// breaker is the circuit breaker of a Pool: the state machine of
// internal/breaker, under the name of its [BreakerConfig] and reporting to
// its tracers, judging calls by their [Class].
type breaker struct {
	name    string
	tracers []BreakerTracer // none: no one to report to
	cb      *circuit.Breaker
}

// newBreaker returns the pool's closed breaker, or nil when cfg is nil (it
// has been validated). It reports to cfg.Tracer and to the pool's tracer
// when that is a [BreakerTracer]: once to a tracer that is both, and to
// tracers of a type that cannot be compared as different ones.
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

// breakerSettings resolves cfg to the settings of the state machine: the
// defaults of BreakerConfig applied, a negative value off.
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
		// No window: the ratio rules have nothing to look at.
		s.FailureRatio, s.SlowCallRatio = 0, 0
	}
	return s
}

// judgeBreakerCall decides how a call that ended with err counts, as
// [BreakerConfig] documents: the caller's own cancellation, a nested
// breaker's refusal, conflicts and permanent errors say nothing about the
// database's health.
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

// do runs fn through the breaker: at once ErrCircuitOpen when it is open,
// else fn, whose outcome is counted.
func (b *breaker) do(ctx context.Context, fn func(ctx context.Context) error) error {
	return b.cb.Do(ctx, fn)
}

// State returns the breaker's state now.
func (b *breaker) State() BreakerState { return breakerState(b.cb.State()) }

// stats returns a snapshot of the breaker.
func (b *breaker) stats() BreakerStats {
	s := b.cb.Stats()
	return BreakerStats{
		Name: b.name, State: breakerState(s.State),
		CallCount: s.Calls, FailureCount: s.Failures, SlowCount: s.Slow,
		RejectedCount: s.Rejected, OpenedCount: s.Opened,
	}
}

// report hands a state change to the tracers.
func (b *breaker) report(ctx context.Context, c circuit.Change) {
	d := TraceBreakerStateChangeData{
		Name: b.name, From: breakerState(c.From), To: breakerState(c.To), Reason: c.Reason,
		Calls: c.Calls, Failures: c.Failures, Slow: c.Slow,
	}
	for _, t := range b.tracers {
		t.TraceBreakerStateChange(ctx, d)
	}
}

// breakerState converts a state of the state machine: the two enums list
// the states in the same order (TestBreakerStatesMatch).
func breakerState(s circuit.State) BreakerState { return BreakerState(s) }

// same reports whether two tracers are the same value; tracers of a type
// that cannot be compared are taken as different.
func same(a, b BreakerTracer) (eq bool) {
	defer func() {
		if recover() != nil {
			eq = false
		}
	}()
	return a == b
}
