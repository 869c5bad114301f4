package slotlimit

import (
	"context"
	"errors"
	"sync"
	"time"
)

// pacePoll bounds the wait of a paced connect for one in flight whose
// failure nobody reports, and paceMax the whole of its wait: a connect in
// flight that hangs (a server or a network gone slow) must not hold the
// pool's next connects back for longer.
const (
	pacePoll = 5 * time.Millisecond
	paceMax  = 100 * time.Millisecond
)

// errPaced is what a connect the pacer holds back returns, when its
// acquire may wait for a held connection instead ([WaitsKey]) and the pool
// holds one: the acquire takes the first one released.
var errPaced = errors.New("slotlimit: the connect waits for those in flight")

// errGrow is what a connect returns that its acquire, which may wait for
// a held connection ([WaitsKey]), does not make: the pool connects in the
// background instead ([Limit.grow]), and the acquire takes the first
// connection back in the pool.
var errGrow = errors.New("slotlimit: the pool connects in the background")

// pacer paces a pool's connects: one at a time until the pool holds two
// connections, then up to half as many at once as it holds; a connect
// waits paceMax at most, or, when its acquire can take a held connection
// instead, not at all (errPaced) until that acquire has waited paceMax
// since the pacer first held it back. A pool
// growing under a burst then ramps up as fast as its connects answer,
// doubling every few, and a fleet of pools starting together takes the
// server's slots in turns instead of first come, first served: each pool
// gets its first connection before any gets its third. A server that
// restarts is not met by every pool's whole size at once.
type pacer struct {
	mu      sync.Mutex
	blocked int           // connects waiting here
	next    chan struct{} // closed when a connect in flight ends; nil: none made
}

// wait returns when a connect may go: fewer connects of the pool are in
// flight than it may have, or it waited paceMax; or, with errPaced, at
// once when it would wait, ctx is marked with [WaitsKey] and the pool holds
// a connection. stat tells how many connections the pool holds, those
// connecting included (this one among them), and how many connect.
//
// When the pool can grow in the background (grow), an acquire marked with
// [WaitsKey] makes a connect only when the pool holds none and none is in
// flight: otherwise it gets errGrow where its connect would go (or has
// been held back paceMax), and errPaced before. A connect of grow's own
// goes at once.
func (p *pacer) wait(ctx context.Context, stat func() (total, connecting int), grow bool) error {
	if grow && ctx.Value(growKey{}) != nil {
		return nil
	}
	var timer *time.Timer
	var deadline time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	waits := waitsForHeld(ctx)
	p.mu.Lock()
	blocked := false
	for {
		total, connecting := stat()
		// Those in flight: connecting, but for those blocked here and this
		// one.
		inFlight := connecting - p.blocked
		if !blocked {
			inFlight--
		}
		held := total - connecting
		goes := inFlight < max(1, held/2) || blocked && !time.Now().Before(deadline)
		if waits && grow && (held > 0 || inFlight > 0) {
			// The acquire waits for a connection in the pool, or for the
			// one in flight: the pool grows in the background.
			if blocked {
				p.blocked--
			}
			p.mu.Unlock()
			if goes || pacedFor(ctx) >= paceMax {
				return errGrow
			}
			return errPaced
		}
		if !goes && waits {
			goes = pacedFor(ctx) >= paceMax // no release served it meanwhile
		}
		if goes || held > 0 && waits {
			if blocked {
				p.blocked--
			}
			p.mu.Unlock()
			if !goes {
				return errPaced
			}
			return nil
		}
		if !blocked {
			p.blocked++
			blocked = true
			deadline = time.Now().Add(paceMax)
		}
		if p.next == nil {
			p.next = make(chan struct{})
		}
		next := p.next
		p.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(min(pacePoll, time.Until(deadline)))
		} else {
			timer.Reset(min(pacePoll, time.Until(deadline)))
		}
		select {
		case <-next:
		case <-timer.C:
		case <-ctx.Done():
			p.mu.Lock()
			p.blocked--
			p.mu.Unlock()
			return ctx.Err()
		}
		p.mu.Lock()
	}
}

// done says a connect ended: the connects waiting look again.
func (p *pacer) done() {
	p.mu.Lock()
	if p.next != nil {
		close(p.next)
		p.next = nil
	}
	p.mu.Unlock()
}
