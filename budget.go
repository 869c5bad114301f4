package pgtx

import (
	"errors"
	"sync"
	"time"

	"github.com/pgtx-go/pgtx/internal/rolling"
)

// ErrRetryBudgetExhausted is matched (errors.Is) by the error [Transaction]
// returns when an overload, unavailable-server or lost-connection retry was
// refused because the pool's retry budget was spent. The error also wraps the last database
// error, which stays reachable with errors.As.
var ErrRetryBudgetExhausted = errors.New("pgtx: retry budget exhausted")

// Defaults of the retry budget ([RetryConfig].BudgetRatio and the fields
// after it).
const (
	defaultBudgetRatio        = 0.2
	defaultBudgetMinPerSecond = 10
	defaultBudgetWindow       = 10 * time.Second
)

// retryBudget is the live budget of a Pool: a rolling window counting
// successes and the retries they paid for, and a token bucket for the floor.
type retryBudget struct {
	ratio, floor float64

	mu          sync.Mutex
	window      rolling.Window // counts: successes, retries paid for by successes
	floorTokens float64        // the floor's token bucket
	floorCap    float64        // one second's worth, at least one retry
	floorAt     time.Time      // when floorTokens was last refilled
}

// newRetryBudget returns the budget p configures, or nil when it is off.
func newRetryBudget(p RetryConfig, now time.Time) *retryBudget {
	if p.BudgetRatio < 0 {
		return nil
	}
	rb := &retryBudget{
		ratio:   defaultOrNone(p.BudgetRatio, defaultBudgetRatio),
		floor:   defaultOrNone(p.BudgetMinPerSecond, defaultBudgetMinPerSecond),
		floorAt: now,
	}
	if p.BudgetWindow < 0 {
		rb.ratio = 0 // no window: nothing to take a share of
	}
	rb.window.Init(max(durDefault(p.BudgetWindow, defaultBudgetWindow), time.Second), now)
	if rb.floor > 0 {
		rb.floorCap = max(rb.floor, 1)
	}
	rb.floorTokens = rb.floorCap
	return rb
}

// success records a successful call.
func (b *retryBudget) success(now time.Time) {
	b.mu.Lock()
	b.window.Add(now, 1, 0, 0)
	b.mu.Unlock()
}

// withdraw takes one retry from the budget, or reports that it is spent.
func (b *retryBudget) withdraw(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	successes, retries, _ := b.window.Sums(now)
	if float64(retries+1) <= b.ratio*float64(successes) {
		b.window.Add(now, 0, 1, 0)
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
