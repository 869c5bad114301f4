package pgtx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/pgtx-go/pgtx/internal/rolling"
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
		return &invalidArgError{msg: "BreakerConfig: FailureRatio and SlowCallRatio must be at most 1"}
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

// breaker is the circuit breaker of a Pool. It is safe for concurrent use.
type breaker struct {
	cfg   BreakerConfig
	clock clock

	mu          sync.Mutex
	state       BreakerState
	generation  uint64 // bumped on every state change
	window      rolling.Window
	consecutive int
	openedAt    time.Time
	probes      int // admitted in the current half-open state
	probeOK     int
	rejected    int64
	opened      int64
	// pending holds state changes made under mu, reported to the tracer
	// once mu is released (so a tracer may call back into the breaker).
	pending  [2]TraceBreakerStateChangeData
	npending int
}

// unlock releases b.mu and then reports the pending state changes, with
// ctx, the context of the call that made them.
func (b *breaker) unlock(ctx context.Context) {
	pending, n := b.pending, b.npending
	b.npending = 0
	b.mu.Unlock()
	if b.cfg.Tracer != nil {
		for i := range n {
			b.cfg.Tracer.TraceBreakerStateChange(ctx, pending[i])
		}
	}
}

// newBreaker returns a closed breaker; cfg has been validated.
func newBreaker(cfg BreakerConfig, clk clock) *breaker {
	cfg.ConsecutiveFailures = defaultOrNone(cfg.ConsecutiveFailures, defaultBreakerConsecutiveFailures)
	cfg.FailureRatio = defaultOrNone(cfg.FailureRatio, defaultBreakerFailureRatio)
	cfg.SlowCallRatio = defaultOrNone(cfg.SlowCallRatio, defaultBreakerSlowCallRatio)
	cfg.SlowCallThreshold = defaultOrNone(cfg.SlowCallThreshold, defaultBreakerSlowCallThreshold)
	cfg.MinCalls = defaultOrNone(cfg.MinCalls, defaultBreakerMinCalls)
	if cfg.Window < 0 {
		// No window: the ratio rules have nothing to look at.
		cfg.FailureRatio, cfg.SlowCallRatio = 0, 0
	}
	cfg.Window = defaultOrNone(cfg.Window, defaultBreakerWindow)
	cfg.OpenFor = defaultOrNone(cfg.OpenFor, defaultBreakerOpenFor)
	cfg.HalfOpenProbes = defaultOrNone(cfg.HalfOpenProbes, defaultBreakerHalfOpenProbes)
	b := &breaker{cfg: cfg, clock: clk}
	b.window.Init(max(cfg.Window, defaultBreakerWindow/10), clk.Now())
	return b
}

// do runs fn through the breaker: at once ErrCircuitOpen when it is open,
// else fn, whose error and duration are counted as BreakerConfig says. A
// panic in fn counts as a failure (a half-open probe that panics opens the
// breaker again) and then propagates unchanged.
func (b *breaker) do(ctx context.Context, fn func(ctx context.Context) error) error {
	ticket, err := b.allow(ctx)
	if err != nil {
		return err
	}
	start := b.clock.Now()
	returned := false
	defer func() {
		if !returned {
			b.record(ctx, ticket, outcome{counted: true, failed: true, slow: b.isSlow(b.clock.Now().Sub(start))})
		}
	}()
	err = fn(ctx)
	returned = true
	b.record(ctx, ticket, b.judge(ctx, err, b.clock.Now().Sub(start)))
	return err
}

// State returns the breaker's state now.
func (b *breaker) State() BreakerState {
	b.mu.Lock()
	defer b.unlock(context.Background())
	b.advance(b.clock.Now())
	return b.state
}

// stats returns a snapshot of the breaker.
func (b *breaker) stats() BreakerStats {
	b.mu.Lock()
	defer b.unlock(context.Background())
	now := b.clock.Now()
	b.advance(now)
	calls, failures, slow := b.window.Sums(now)
	return BreakerStats{Name: b.cfg.Name, State: b.state, CallCount: calls, FailureCount: failures, SlowCount: slow, RejectedCount: b.rejected, OpenedCount: b.opened}
}

// ticket is an admitted call: its outcome counts only in the state
// generation that admitted it.
type ticket struct{ generation uint64 }

// allow admits a call or refuses it with ErrCircuitOpen.
func (b *breaker) allow(ctx context.Context) (ticket, error) {
	b.mu.Lock()
	defer b.unlock(ctx)
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
func (b *breaker) advance(now time.Time) {
	if b.state == BreakerOpen && !now.Before(b.openedAt.Add(b.cfg.OpenFor)) {
		if b.cfg.HalfOpenProbes == 0 {
			b.setState(BreakerClosed, "open for "+b.cfg.OpenFor.String()+", no probes", now)
			return
		}
		b.setState(BreakerHalfOpen, "open for "+b.cfg.OpenFor.String(), now)
	}
}

// outcome is how a call counts.
type outcome struct{ counted, failed, slow bool }

// judge decides how a call that ended with err after d counts.
func (b *breaker) judge(ctx context.Context, err error, d time.Duration) outcome {
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
	return outcome{counted: true, failed: failed, slow: b.isSlow(d)}
}

// isSlow reports whether a call that took d counts as slow.
func (b *breaker) isSlow(d time.Duration) bool {
	return b.cfg.SlowCallThreshold > 0 && d >= b.cfg.SlowCallThreshold
}

// record counts a finished call as o says.
func (b *breaker) record(ctx context.Context, t ticket, o outcome) {
	b.mu.Lock()
	defer b.unlock(ctx)
	now := b.clock.Now()
	if t.generation != b.generation {
		return // admitted before the last state change: stale
	}
	switch b.state {
	case BreakerClosed:
		if !o.counted {
			return
		}
		b.window.Add(now, 1, b2i64(o.failed), b2i64(o.slow))
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
func (b *breaker) tripIfNeeded(now time.Time) {
	c := b.cfg
	if c.ConsecutiveFailures > 0 && b.consecutive >= c.ConsecutiveFailures {
		b.setState(BreakerOpen, fmt.Sprintf("%d consecutive failures", b.consecutive), now)
		return
	}
	calls, failures, slow := b.window.Sums(now)
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
func (b *breaker) setState(to BreakerState, reason string, now time.Time) {
	from := b.state
	calls, failures, slow := b.window.Sums(now)
	b.state = to
	b.generation++
	b.probes, b.probeOK = 0, 0
	switch to {
	case BreakerOpen:
		b.openedAt = now
		b.opened++
	case BreakerClosed:
		b.window.Reset(now)
		b.consecutive = 0
	}
	if b.cfg.Tracer != nil && b.npending < len(b.pending) {
		b.pending[b.npending] = TraceBreakerStateChangeData{
			Name: b.cfg.Name, From: from, To: to, Reason: reason, Calls: calls, Failures: failures, Slow: slow,
		}
		b.npending++
	}
}

// joinBreakerTracers returns a tracer reporting to both a and b; either may
// be nil.
func joinBreakerTracers(a, b BreakerTracer) BreakerTracer {
	switch {
	case a == nil:
		return b
	case b == nil || same(a, b):
		return a
	}
	return breakerTracers{a, b}
}

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

type breakerTracers [2]BreakerTracer

func (t breakerTracers) TraceBreakerStateChange(ctx context.Context, data TraceBreakerStateChangeData) {
	t[0].TraceBreakerStateChange(ctx, data)
	t[1].TraceBreakerStateChange(ctx, data)
}
