package breaker

import (
	"context"
	"sync"
	"time"

	"github.com/pgtx-go/pgtx/internal/rolling"
)

// State is the state of a [Breaker], in the order a breaker goes through
// them.
type State int

// The states of a [Breaker].
const (
	// Closed lets every call through and counts their outcomes.
	Closed State = iota
	// HalfOpen lets [Settings].HalfOpenProbes calls through to decide
	// whether to close again.
	HalfOpen
	// Open refuses every call with [Settings].ErrOpen.
	Open
)

// Clock tells a [Breaker] the time; tests pass a fake one.
type Clock interface{ Now() time.Time }

// Settings configures a [Breaker]. Its owner has applied every default
// already: a zero rule is off.
type Settings struct {
	// ConsecutiveFailures opens the breaker after that many failures in a
	// row; 0: the rule is off.
	ConsecutiveFailures int
	// FailureRatio opens the breaker when at least that share of the calls
	// in the window failed; 0: the rule is off.
	FailureRatio float64
	// SlowCallRatio opens the breaker when at least that share of the calls
	// in the window were slow; 0: the rule is off.
	SlowCallRatio float64
	// SlowCallThreshold is the duration from which a counted call is slow;
	// 0: no call is.
	SlowCallThreshold time.Duration
	// MinCalls is how many calls the window must hold before the ratio
	// rules apply.
	MinCalls int
	// Window is how far back the ratio rules look; it must be positive.
	Window time.Duration
	// OpenFor is how long the breaker stays open before it lets probes
	// through; 0: the next call is a probe.
	OpenFor time.Duration
	// HalfOpenProbes is how many calls the half-open breaker lets through;
	// 0: the breaker closes once OpenFor has passed.
	HalfOpenProbes int
	// Judge says whether a call that ended with err counts, and if it
	// does, whether it failed; ctx is the call's context. It must be set:
	// what says something about the service's health is its owner's
	// knowledge.
	Judge func(ctx context.Context, err error) (counted, failed bool)
	// ErrOpen is the error of a refused call, returned as it is.
	ErrOpen error
	// OnChange, when set, receives every state change once the breaker's
	// lock is released, so it may call back into the breaker. ctx is the
	// context of the call whose outcome made the change, or
	// context.Background when time did (open to half-open).
	OnChange func(ctx context.Context, c Change)
}

// Change describes a state change.
type Change struct {
	From, To State
	// Reason says which rule opened the breaker, or why it closed.
	Reason string
	// Calls, Failures and Slow are the window's counts at the change.
	Calls, Failures, Slow int64
}

// Stats is a snapshot of a [Breaker].
type Stats struct {
	State State
	// Calls, Failures and Slow count the current window.
	Calls, Failures, Slow int64
	// Rejected counts the refused calls, Opened the times the breaker
	// opened.
	Rejected, Opened int64
}

// Breaker is a circuit breaker. It is safe for concurrent use.
type Breaker struct {
	s     Settings
	clock Clock

	mu          sync.Mutex
	state       State
	generation  uint64 // bumped on every state change
	window      rolling.Window
	consecutive int
	openedAt    time.Time
	probes      int // admitted in the current half-open state
	probeOK     int
	rejected    int64
	opened      int64
	// pending holds the state changes made under mu, delivered once mu is
	// released. One call makes at most two: open to half-open as it is
	// admitted, then half-open to open or closed as it ends.
	pending  [2]Change
	npending int
}

// New returns a closed breaker.
func New(s Settings, clk Clock) *Breaker {
	b := &Breaker{s: s, clock: clk}
	b.window.Init(s.Window, clk.Now())
	return b
}

// Do runs fn through the breaker: at once [Settings].ErrOpen when it is
// open, else fn, whose error and duration are counted as [Settings].Judge
// and SlowCallThreshold say. A panic in fn counts as a failure (a half-open
// probe that panics opens the breaker again) and then propagates unchanged.
func (b *Breaker) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	t, err := b.allow(ctx)
	if err != nil {
		return err
	}
	start := b.clock.Now()
	returned := false
	defer func() {
		if !returned {
			b.record(ctx, t, outcome{counted: true, failed: true, slow: b.isSlow(b.clock.Now().Sub(start))})
		}
	}()
	err = fn(ctx)
	returned = true
	d := b.clock.Now().Sub(start)
	counted, failed := b.s.Judge(ctx, err)
	b.record(ctx, t, outcome{counted: counted, failed: failed, slow: counted && b.isSlow(d)})
	return err
}

// State returns the breaker's state now.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.unlock(context.Background())
	b.advance(b.clock.Now())
	return b.state
}

// Stats returns a snapshot of the breaker.
func (b *Breaker) Stats() Stats {
	b.mu.Lock()
	defer b.unlock(context.Background())
	now := b.clock.Now()
	b.advance(now)
	calls, failures, slow := b.window.Sums(now)
	return Stats{State: b.state, Calls: calls, Failures: failures, Slow: slow, Rejected: b.rejected, Opened: b.opened}
}

// unlock releases b.mu and then delivers the pending state changes with
// ctx, the context of the call that made them: a callback run under mu
// could not ask the breaker anything without deadlocking.
func (b *Breaker) unlock(ctx context.Context) {
	pending, n := b.pending, b.npending
	b.npending = 0
	b.mu.Unlock()
	for i := range n {
		b.s.OnChange(ctx, pending[i])
	}
}

// isSlow reports whether a call that took d counts as slow.
func (b *Breaker) isSlow(d time.Duration) bool {
	return b.s.SlowCallThreshold > 0 && d >= b.s.SlowCallThreshold
}
