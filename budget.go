package pgtx

import (
	"errors"
	"sync"
	"time"
)

// ErrRetryBudgetExhausted is matched (errors.Is) by the error [Transaction]
// returns when an overload, unavailable-server or lost-connection retry was
// refused because the pool's retry budget was spent. The error also wraps the last database
// error, which stays reachable with errors.As.
var ErrRetryBudgetExhausted = errors.New("pgtx: retry budget exhausted")

// Defaults of RetryBudget.
const (
	defaultBudgetRatio        = 0.2
	defaultBudgetMinPerSecond = 10
	defaultBudgetWindow       = 10 * time.Second
)

// RetryBudget bounds the overload, unavailable-server ([ClassUnavailable])
// and lost-connection retries of a whole Pool, so that per-call retries
// cannot add up to a retry storm when a database sheds load or is down:
// over the last Window, such retries may not exceed
// Ratio times the calls that succeeded, plus a floor of MinPerSecond retries
// per second (a token bucket holding at most one second's worth, full at the
// start), so a quiet or just-started client can still retry. It is the shape
// of Finagle's RetryBudget, counted over successes. Conflict retries (40001,
// 40P01) are not budgeted: a conflict means someone else committed, the
// database is making progress.
//
// The zero value is the default: on, Ratio 0.2, MinPerSecond 10, Window 10s.
// A negative Ratio switches the budget off: only the per-call caps apply.
type RetryBudget struct {
	// Ratio is the share of recent successful calls that may be retried.
	// Default 0.2; negative: the budget is off.
	Ratio float64
	// MinPerSecond is the floor: retries allowed per second whatever the
	// successes. Default 10; negative: no floor.
	MinPerSecond float64
	// Window is how far back successes and retries count. Default 10s;
	// negative: no window, only the floor allows retries.
	Window time.Duration
}

func (b RetryBudget) validate() error {
	if b.Ratio != b.Ratio || b.MinPerSecond != b.MinPerSecond {
		return &invalidArgError{msg: "RetryBudget: Ratio and MinPerSecond must be numbers"}
	}
	return nil
}

// retryBudget is the live budget of a Pool: a rolling window counting
// successes and the retries they paid for, and a token bucket for the floor.
type retryBudget struct {
	ratio, floor float64

	mu          sync.Mutex
	window      rolling   // counts: successes, retries paid for by successes
	floorTokens float64   // the floor's token bucket
	floorCap    float64   // one second's worth, at least one retry
	floorAt     time.Time // when floorTokens was last refilled
}

// newRetryBudget returns the budget of b, or nil when it is off.
func newRetryBudget(b RetryBudget, now time.Time) *retryBudget {
	if b.Ratio < 0 {
		return nil
	}
	rb := &retryBudget{
		ratio:   defaultOrNone(b.Ratio, defaultBudgetRatio),
		floor:   defaultOrNone(b.MinPerSecond, defaultBudgetMinPerSecond),
		floorAt: now,
	}
	if b.Window < 0 {
		rb.ratio = 0 // no window: nothing to take a share of
	}
	rb.window.init(max(durDefault(b.Window, defaultBudgetWindow), time.Second), now)
	if rb.floor > 0 {
		rb.floorCap = max(rb.floor, 1)
	}
	rb.floorTokens = rb.floorCap
	return rb
}

// success records a successful call.
func (b *retryBudget) success(now time.Time) {
	b.mu.Lock()
	b.window.add(now, 1, 0, 0)
	b.mu.Unlock()
}

// withdraw takes one retry from the budget, or reports that it is spent.
func (b *retryBudget) withdraw(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	successes, retries, _ := b.window.sums(now)
	if float64(retries+1) <= b.ratio*float64(successes) {
		b.window.add(now, 0, 1, 0)
		return true
	}
	if elapsed := now.Sub(b.floorAt); elapsed > 0 {
		b.floorTokens = min(b.floorCap, b.floorTokens+b.floor*elapsed.Seconds())
		b.floorAt = now
	}
	if b.floorTokens >= 1 {
		b.floorTokens--
		return true
	}
	return false
}
