package pgtx

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrCircuitOpen is matched (errors.Is) by the error of a call a circuit
// breaker refused: the database behind it failed or was slow too often, and
// it gets no calls until OpenFor has passed. The refusal costs no I/O.
var ErrCircuitOpen = errors.New("pgtx: circuit breaker is open")

// BreakerState is the state of a circuit breaker.
type BreakerState int

// The states of a circuit breaker.
const (
	// BreakerClosed lets every call through and counts their outcomes.
	BreakerClosed BreakerState = iota
	// BreakerOpen refuses every call with ErrCircuitOpen.
	BreakerOpen
	// BreakerHalfOpen lets HalfOpenProbes calls through to decide whether
	// to close again.
	BreakerHalfOpen
)

// String returns the state's name.
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("BreakerState(%d)", int(s))
}

// Defaults of BreakerConfig.
const (
	DefaultBreakerConsecutiveFailures = 5
	DefaultBreakerFailureRatio        = 0.5
	DefaultBreakerSlowCallRatio       = 0.5
	DefaultBreakerSlowCallThreshold   = time.Second
	DefaultBreakerMinCalls            = 10
	DefaultBreakerWindow              = 10 * time.Second
	DefaultBreakerOpenFor             = 5 * time.Second
	DefaultBreakerHalfOpenProbes      = 1
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
	// row. 0 means DefaultBreakerConsecutiveFailures (5); negative
	// switches the rule off.
	ConsecutiveFailures int
	// FailureRatio opens the breaker when at least that share of the calls
	// in the window failed. 0 means DefaultBreakerFailureRatio (0.5);
	// negative switches the rule off.
	FailureRatio float64
	// SlowCallRatio opens the breaker when at least that share of the calls
	// in the window were slow. 0 means DefaultBreakerSlowCallRatio (0.5);
	// negative switches the rule off.
	SlowCallRatio float64
	// SlowCallThreshold is the duration from which a call counts as slow.
	// Size it to 2-3x the normal latency of the calls. 0 means
	// DefaultBreakerSlowCallThreshold (1s).
	SlowCallThreshold time.Duration
	// MinCalls is how many calls the window must hold before the ratio
	// rules apply. 0 means DefaultBreakerMinCalls (10).
	MinCalls int
	// Window is how far back the ratio rules look. 0 means
	// DefaultBreakerWindow (10s).
	Window time.Duration
	// OpenFor is how long the breaker stays open before it lets probes
	// through. 0 means DefaultBreakerOpenFor (5s).
	OpenFor time.Duration
	// HalfOpenProbes is how many calls the half-open breaker lets through;
	// when all of them succeed without being slow it closes, the first that
	// fails or is slow opens it again. 0 means DefaultBreakerHalfOpenProbes
	// (1).
	HalfOpenProbes int
	// Tracer, when set, receives the breaker's state changes. A breaker
	// configured on a Pool also reports to the pool's Config.Tracer when it
	// implements BreakerTracer.
	Tracer BreakerTracer
}

func (c BreakerConfig) validate() error {
	if c.SlowCallThreshold < 0 || c.MinCalls < 0 || c.Window < 0 || c.OpenFor < 0 || c.HalfOpenProbes < 0 ||
		c.FailureRatio > 1 || c.SlowCallRatio > 1 || c.FailureRatio != c.FailureRatio || c.SlowCallRatio != c.SlowCallRatio {
		return &invalidArgError{msg: "BreakerConfig: durations and counts must not be negative, ratios at most 1"}
	}
	return nil
}

// BreakerTracer receives a circuit breaker's state changes.
type BreakerTracer interface {
	TraceBreakerStateChange(data TraceBreakerData)
}

// TraceBreakerData describes a state change.
type TraceBreakerData struct {
	Name     string
	From, To BreakerState
	// Reason says which rule opened the breaker, or why it closed.
	Reason string
	// Calls, Failures and Slow are the window's counts at the change.
	Calls, Failures, Slow int64
}

// BreakerStats is a snapshot of a breaker.
type BreakerStats struct {
	Name  string
	State BreakerState
	// Calls, Failures and Slow are the counts of the current window.
	Calls, Failures, Slow int64
	// Rejected counts calls refused with ErrCircuitOpen; Opened counts the
	// times the breaker opened.
	Rejected, Opened int64
}

// Breaker is a circuit breaker. It is safe for concurrent use.
type Breaker struct {
	cfg   BreakerConfig
	clock clock

	mu          sync.Mutex
	state       BreakerState
	generation  uint64 // bumped on every state change
	window      rolling
	consecutive int
	openedAt    time.Time
	probes      int // admitted in the current half-open state
	probeOK     int
	rejected    int64
	opened      int64
	// pending holds state changes made under mu, reported to the tracer
	// once mu is released (so a tracer may call back into the breaker).
	pending  [2]TraceBreakerData
	npending int
}

// unlock releases b.mu and then reports the pending state changes.
func (b *Breaker) unlock() {
	pending, n := b.pending, b.npending
	b.npending = 0
	b.mu.Unlock()
	if b.cfg.Tracer != nil {
		for i := range n {
			b.cfg.Tracer.TraceBreakerStateChange(pending[i])
		}
	}
}

// NewBreaker returns a closed breaker. A config that cannot be applied is an
// error matching ErrInvalidArgument.
func NewBreaker(cfg BreakerConfig) (*Breaker, error) {
	return newBreaker(cfg, realClock{})
}

func newBreaker(cfg BreakerConfig, clk clock) (*Breaker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.ConsecutiveFailures = defaultOrNone(cfg.ConsecutiveFailures, DefaultBreakerConsecutiveFailures)
	cfg.FailureRatio = defaultOrNone(cfg.FailureRatio, DefaultBreakerFailureRatio)
	cfg.SlowCallRatio = defaultOrNone(cfg.SlowCallRatio, DefaultBreakerSlowCallRatio)
	cfg.SlowCallThreshold = durDefault(cfg.SlowCallThreshold, DefaultBreakerSlowCallThreshold)
	cfg.MinCalls = defaultOrNone(cfg.MinCalls, DefaultBreakerMinCalls)
	cfg.Window = durDefault(cfg.Window, DefaultBreakerWindow)
	cfg.OpenFor = durDefault(cfg.OpenFor, DefaultBreakerOpenFor)
	cfg.HalfOpenProbes = defaultOrNone(cfg.HalfOpenProbes, DefaultBreakerHalfOpenProbes)
	b := &Breaker{cfg: cfg, clock: clk}
	b.window.init(cfg.Window, clk.Now())
	return b, nil
}

// Do runs fn through the breaker: at once ErrCircuitOpen when it is open,
// else fn, whose error and duration are counted as BreakerConfig says. A
// panic in fn counts as a failure (a half-open probe that panics opens the
// breaker again) and then propagates unchanged.
func (b *Breaker) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	ticket, err := b.allow()
	if err != nil {
		return err
	}
	start := b.clock.Now()
	returned := false
	defer func() {
		if !returned {
			b.record(ticket, outcome{counted: true, failed: true, slow: b.clock.Now().Sub(start) >= b.cfg.SlowCallThreshold})
		}
	}()
	err = fn(ctx)
	returned = true
	b.record(ticket, b.judge(ctx, err, b.clock.Now().Sub(start)))
	return err
}

// State returns the breaker's state now.
func (b *Breaker) State() BreakerState {
	b.mu.Lock()
	defer b.unlock()
	b.advance(b.clock.Now())
	return b.state
}

// Stats returns a snapshot of the breaker.
func (b *Breaker) Stats() BreakerStats {
	b.mu.Lock()
	defer b.unlock()
	now := b.clock.Now()
	b.advance(now)
	calls, failures, slow := b.window.sums(now)
	return BreakerStats{Name: b.cfg.Name, State: b.state, Calls: calls, Failures: failures, Slow: slow, Rejected: b.rejected, Opened: b.opened}
}

// ticket is an admitted call: its outcome counts only in the state
// generation that admitted it.
type ticket struct{ generation uint64 }

// allow admits a call or refuses it with ErrCircuitOpen.
func (b *Breaker) allow() (ticket, error) {
	b.mu.Lock()
	defer b.unlock()
	b.advance(b.clock.Now())
	switch b.state {
	case BreakerOpen:
		b.rejected++
		return ticket{}, ErrCircuitOpen
	case BreakerHalfOpen:
		if b.probes >= b.cfg.HalfOpenProbes {
			b.rejected++
			return ticket{}, ErrCircuitOpen
		}
		b.probes++
	}
	return ticket{generation: b.generation}, nil
}

// advance moves an open breaker whose time is up to half-open. b.mu is held.
func (b *Breaker) advance(now time.Time) {
	if b.state == BreakerOpen && !now.Before(b.openedAt.Add(b.cfg.OpenFor)) {
		b.setState(BreakerHalfOpen, "open for "+b.cfg.OpenFor.String(), now)
	}
}

// outcome is how a call counts.
type outcome struct{ counted, failed, slow bool }

// judge decides how a call that ended with err after d counts.
func (b *Breaker) judge(ctx context.Context, err error, d time.Duration) outcome {
	if errors.Is(err, ErrCircuitOpen) || (errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled)) {
		return outcome{}
	}
	failed := false
	switch Classify(err) {
	case ClassConflict, ClassPermanent:
		return outcome{}
	case ClassConnectionLost, ClassAmbiguous, ClassOverload, ClassUnavailable, ClassTimeout:
		failed = true
	}
	return outcome{counted: true, failed: failed, slow: d >= b.cfg.SlowCallThreshold}
}

// record counts a finished call as o says.
func (b *Breaker) record(t ticket, o outcome) {
	b.mu.Lock()
	defer b.unlock()
	now := b.clock.Now()
	if t.generation != b.generation {
		return // admitted before the last state change: stale
	}
	switch b.state {
	case BreakerClosed:
		if !o.counted {
			return
		}
		b.window.add(now, 1, b2i64(o.failed), b2i64(o.slow))
		if o.failed {
			b.consecutive++
		} else {
			b.consecutive = 0
		}
		b.tripIfNeeded(now)
	case BreakerHalfOpen:
		switch {
		case !o.counted:
			b.probes-- // the probe told nothing: let another one through
		case o.failed:
			b.setState(BreakerOpen, "half-open probe failed", now)
		case o.slow:
			b.setState(BreakerOpen, "half-open probe was slow", now)
		default:
			if b.probeOK++; b.probeOK >= b.cfg.HalfOpenProbes {
				b.setState(BreakerClosed, "half-open probes succeeded", now)
			}
		}
	}
}

// tripIfNeeded opens a closed breaker when a rule says so. b.mu is held.
func (b *Breaker) tripIfNeeded(now time.Time) {
	c := b.cfg
	if c.ConsecutiveFailures > 0 && b.consecutive >= c.ConsecutiveFailures {
		b.setState(BreakerOpen, fmt.Sprintf("%d consecutive failures", b.consecutive), now)
		return
	}
	calls, failures, slow := b.window.sums(now)
	if calls < int64(c.MinCalls) {
		return
	}
	switch {
	case c.FailureRatio > 0 && float64(failures) >= c.FailureRatio*float64(calls):
		b.setState(BreakerOpen, fmt.Sprintf("failure ratio %d/%d", failures, calls), now)
	case c.SlowCallRatio > 0 && float64(slow) >= c.SlowCallRatio*float64(calls):
		b.setState(BreakerOpen, fmt.Sprintf("slow-call ratio %d/%d (>= %v)", slow, calls, c.SlowCallThreshold), now)
	}
}

// setState changes state, resets what the new state starts from, and
// reports the change. b.mu is held.
func (b *Breaker) setState(to BreakerState, reason string, now time.Time) {
	from := b.state
	calls, failures, slow := b.window.sums(now)
	b.state = to
	b.generation++
	b.probes, b.probeOK = 0, 0
	switch to {
	case BreakerOpen:
		b.openedAt = now
		b.opened++
	case BreakerClosed:
		b.window.reset(now)
		b.consecutive = 0
	}
	if b.cfg.Tracer != nil && b.npending < len(b.pending) {
		b.pending[b.npending] = TraceBreakerData{
			Name: b.cfg.Name, From: from, To: to, Reason: reason, Calls: calls, Failures: failures, Slow: slow,
		}
		b.npending++
	}
}

func b2i64(v bool) int64 {
	if v {
		return 1
	}
	return 0
}
