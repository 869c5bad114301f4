package contention

import (
	"context"
	"time"
)

// waiter is an attempt waiting at the gate.
type waiter struct {
	prio     int64
	ch       chan struct{}
	admitted bool // under Gate.mu
	limit    int  // the limit it was admitted under, and its epoch
	epoch    int
	// exclusive: it runs alone (a call that kept losing).
	exclusive bool
}

// enqueueLocked puts a waiter of priority prio in the queue, behind those
// of a lower or equal one (older calls first).
func (g *Gate) enqueueLocked(prio int64, exclusive bool) *waiter {
	w := &waiter{prio: prio, ch: make(chan struct{}, 1), exclusive: exclusive}
	i := len(g.waiters)
	for i > 0 && g.waiters[i-1].prio > prio {
		i--
	}
	g.waiters = append(g.waiters, nil)
	copy(g.waiters[i+1:], g.waiters[i:])
	g.waiters[i] = w
	g.win.waited = true
	return w
}

// awaitTurn waits until w is admitted, ctx ends, or the wait's bound
// passes: the acquire timeout, or bail (the time an attempt still has
// before its deadline; negative: none), whichever is sooner.
func (g *Gate) awaitTurn(ctx context.Context, w *waiter, bail time.Duration) error {
	var timeout <-chan time.Time
	var why error
	if at := g.m.acquireTimeout; at > 0 && (bail < 0 || at < bail) {
		bail, why = at, g.m.timeoutErr
	} else if bail > 0 {
		why = ErrAdmissionDeadline
	}
	if bail > 0 {
		t := time.NewTimer(bail)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout:
		return why
	}
}

// leaveQueue ends w's wait, begun at since, which err ended unless nil: it
// returns w's admission, or err after leaving the queue (and giving the
// slot to the next when w was admitted as the wait ended).
func (g *Gate) leaveQueue(w *waiter, since time.Time, err error) (Admission, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	waited := g.m.clock.Now().Sub(since)
	g.wait.Observe(waited)
	if !w.admitted {
		for j, x := range g.waiters {
			if x == w {
				g.waiters = append(g.waiters[:j], g.waiters[j+1:]...)
				break
			}
		}
		g.inflight.Add(-1)
		return Admission{}, err
	}
	t := Admission{Held: w.limit > 0, Limit: w.limit, epoch: w.epoch, Wait: waited, alone: w.exclusive && w.limit > 0}
	if err != nil {
		// Admitted as the wait ended: give the slot to the next.
		g.releaseLocked(t, g.m.clock.Now())
		g.inflight.Add(-1)
		return Admission{}, err
	}
	return t, nil
}
