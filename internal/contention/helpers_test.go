package contention

import (
	"context"
	"errors"
	"testing"
	"time"
)

// testThreshold is the pool's default threshold.
const testThreshold = 0.1

// errTestTimeout stands for the pool's acquire timeout error.
var errTestTimeout = errors.New("acquire timeout")

// fakeClock is a clock the test moves.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// realClock is the real clock: inside a synctest bubble, the bubble's.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// event is a change of limit, as OnLimit reports it.
type event struct {
	Label           string
	Limiting        bool
	Limit, Previous int
	ConflictRatio   float64
}

// recorder records the manager's changes of limit.
type recorder struct{ events []event }

func (r *recorder) onLimit(_ context.Context, label string, limiting bool, limit, previous int, ratio float64) {
	r.events = append(r.events, event{label, limiting, limit, previous, ratio})
}

// testSettings are the settings of a pool of maxConns connections on clk,
// with the default threshold, no acquire timeout, and r receiving the
// changes of limit.
func testSettings(clk Clock, maxConns int, r *recorder) Settings {
	s := Settings{Clock: clk, Threshold: testThreshold, MaxLimit: maxConns,
		AcquireTimeoutErr: errTestTimeout}
	if r != nil {
		s.OnLimit = r.onLimit
	}
	return s
}

// newTestGate returns the gate of the empty label of a manager on a fake
// clock, with the default threshold.
func newTestGate(t *testing.T, maxConns int) (*Gate, *fakeClock, *recorder) {
	t.Helper()
	clk := &fakeClock{now: time.Unix(1000, 0)}
	r := &recorder{}
	m := New(testSettings(clk, maxConns, r))
	return &m.def, clk, r
}

// bubbleGate returns a gate on the real clock (inside a synctest bubble,
// the bubble's), limiting to limit.
func bubbleGate(t *testing.T, limit int) *Gate {
	t.Helper()
	g, _, _ := newTestGate(t, 4)
	g.m.clock = realClock{}
	engage(g, limit)
	return g
}

// engage makes g limit its attempts to limit.
func engage(g *Gate, limit int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.limit, g.best, g.probeDir, g.probeEvery = limit, limit, -1, probeInterval
	g.est = map[int]float64{}
	g.win = measurement{start: g.m.clock.Now(), last: g.m.clock.Now()}
	g.limiting.Store(true)
}
