package retry

import (
	"sync"
	"time"

	"github.com/pgtx-go/pgtx/internal/rolling"
)

// Budget is the live retry budget of a pool: a rolling window counting
// successes and the retries they paid for, and a token bucket for the floor.
type Budget struct {
	ratio, floor float64

	mu          sync.Mutex
	window      rolling.Window // counts: successes, retries paid for by successes
	floorTokens float64        // the floor's token bucket
	floorCap    float64        // one second's worth, at least one retry
	floorAt     time.Time      // when floorTokens was last refilled
}

// NewBudget returns a budget that allows, over the last window, retries up
// to ratio times the successes, plus floor retries per second (a token
// bucket holding one second's worth, at least one retry, full at the start);
// a window of 0 counts no successes, only the floor. The caller applies
// the defaults and switches the budget off by not making one.
func NewBudget(ratio, floor float64, window time.Duration, now time.Time) *Budget {
	rb := &Budget{ratio: ratio, floor: floor, floorAt: now}
	if window <= 0 {
		rb.ratio = 0 // no window: nothing to take a share of
	}
	rb.window.Init(max(window, time.Second), now)
	if rb.floor > 0 {
		rb.floorCap = max(rb.floor, 1)
	}
	rb.floorTokens = rb.floorCap
	return rb
}

// Success records a successful call.
func (b *Budget) Success(now time.Time) {
	b.mu.Lock()
	b.window.Add(now, 1, 0, 0)
	b.mu.Unlock()
}

// Withdraw takes one retry from the budget, or reports that it is spent.
func (b *Budget) Withdraw(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	successes, retries, _ := b.window.Sums(now)
	if float64(retries+1) <= b.ratio*float64(successes) {
		b.window.Add(now, 0, 1, 0)
		return true
	}
	b.refill(now)
	if b.floorTokens >= 1 {
		b.floorTokens--
		return true
	}
	return false
}

// Pace takes one retry from the budget for a retry that is never refused
// (one of a server that cannot be reached, which retries do not load) and
// returns how long it must wait for it: 0 while the budget allows it, else
// the time until the floor's bucket holds the token it takes ahead. The
// bucket lends at most one bucket's worth ahead, so a wait is at most the
// time the floor takes to fill a bucket; with no floor nothing paces.
func (b *Budget) Pace(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	successes, retries, _ := b.window.Sums(now)
	if float64(retries+1) <= b.ratio*float64(successes) {
		b.window.Add(now, 0, 1, 0)
		return 0
	}
	if b.floor <= 0 {
		return 0
	}
	b.refill(now)
	if b.floorTokens-1 >= -b.floorCap {
		b.floorTokens--
	}
	if b.floorTokens >= 0 {
		return 0
	}
	return time.Duration(-b.floorTokens / b.floor * float64(time.Second))
}

// refill adds the floor's tokens since it was last refilled.
func (b *Budget) refill(now time.Time) {
	if elapsed := now.Sub(b.floorAt); elapsed > 0 {
		b.floorTokens = min(b.floorCap, b.floorTokens+b.floor*elapsed.Seconds())
		b.floorAt = now
	}
}
