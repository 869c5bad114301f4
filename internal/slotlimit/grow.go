package slotlimit

import (
	"context"
	"time"
)

// growTimeout bounds a connect [Limit.grow] makes: one that hangs must not
// hold the pool's growth back for longer.
const growTimeout = 5 * time.Second

// growKey marks the context of a connect [Limit.grow] makes: the pacer
// lets it go at once, since grow paces those itself.
type growKey struct{}

// growsFor reports whether the acquire of ctx, which may wait for a held
// connection ([WaitsKey]), waits without trying the pool: none of its
// connections is idle, it holds one or has one on its way (the first
// connect of an empty pool is the acquire's own), and it is below Max
// (at Max, pgxpool hands a waiting acquire the next release). Trying would only make
// pgxpool start a connect that the pacer turns back. The pool grows for
// the acquire when the limit leaves room (or a try beyond it is due) and
// a connect would go, or the acquire has waited paceMax since it was
// first held back.
func (l *Limit) growsFor(ctx context.Context) bool {
	if l.s.Grow == nil || l.s.Idle == nil || !waitsForHeld(ctx) || l.s.Idle() > 0 {
		return false
	}
	total, connecting := l.s.Stat()
	held := total - connecting
	if held == 0 && connecting == 0 || total >= l.s.Max {
		return false // the first connect is its own; at Max, the pool hands it the next release
	}
	w := waiterOf(ctx)
	if w != nil {
		w.paced()
	}
	capped := l.capped.Load()
	due := capped && l.due(l.s.Now())
	room := total < l.s.Max && (!capped || total < int(l.limit.Load()) || due)
	if room && (due || connecting < max(1, held/2) || pacedFor(ctx) >= paceMax) {
		l.grow(w)
	}
	return true
}

// grow adds a connection to the pool in the background, with
// Settings.Grow, for the acquires that wait for a held connection: none
// of them waits for a connect of its own, which a starting fleet or a
// server gone slow can make last longer than the call, and each takes
// the first connection back in the pool, a new one or a released one.
// Up to half as many connects as the pool holds go at once, and at least
// one. Beyond that, the waiter w (nil: none) that started none yet may
// start one, paceMax after the last started: connects that hang (a server
// gone slow) then hold its acquire back no longer than the pacer would,
// and no more of them pile up than there are acquires.
func (l *Limit) grow(w *waiter) {
	if l.s.Grow == nil {
		return
	}
	allowed := max(1, l.established()/2)
	now := time.Now()
	l.mu.Lock()
	if l.closed || l.growing >= allowed && (w == nil || w.grew || now.Sub(l.grewAt) < paceMax) {
		l.mu.Unlock()
		return
	}
	if w != nil {
		w.grew = true
	}
	l.grewAt = now
	l.growing++
	l.grows.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.grows.Done()
		ctx, cancel := context.WithTimeout(context.WithValue(l.stop, growKey{}, true), growTimeout)
		err := l.s.Grow(ctx)
		if err != nil {
			l.mustWait(ctx, err) // a refusal for lack of slots teaches the limit
		}
		cancel()
		l.mu.Lock()
		l.growing--
		l.mu.Unlock()
		l.Back() // the waiters look again: the connection is idle, or a next grow may go
	}()
}
