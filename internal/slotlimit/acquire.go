package slotlimit

import (
	"context"
	"errors"
	"time"

	"github.com/pgtx-go/pgtx/internal/classify"
)

// The first waiter in the queue also tries again after a poll, which
// starts at pollMin and doubles up to pollMax: a release wakes it just
// before its connection is back in the pool (the release tracer), a
// connection the pool loses wakes nobody, and a try beyond the limit falls
// due unannounced. The others wait for their turn without a timer.
const (
	pollMin = 2 * time.Millisecond
	pollMax = 50 * time.Millisecond
)

// Acquire takes a connection from pool: when the server refuses its
// connect for lack of slots while the pool holds connections, or the limit
// holds the connect back, it waits for one of those until ctx ends, and
// the refusal is not the caller's. The waits are served first come first:
// while acquires wait, a new one waits behind them. A pool that holds none
// gets the refusal back, to back off from.
func Acquire[C any, P Pool[C]](ctx context.Context, l *Limit, pool P) (C, error) {
	// A try beyond the limit, when due, goes ahead of the queue: the
	// waiters, woken by releases, would seldom make it.
	if l.waiting.Load() == 0 && !l.full() || l.capped.Load() && l.due(l.s.Now()) {
		c, err := pool.Acquire(ctx)
		if err == nil || !l.mustWait(ctx, err) {
			return c, err
		}
		// The pacer held the connect back, or the acquire asked for a
		// background connect instead (mustWait, for no waiter yet).
		w := &waiter{ch: make(chan struct{}, 1), grew: errors.Is(err, errGrow)}
		if errors.Is(err, errPaced) || w.grew {
			w.paced()
		}
		return wait(ctx, l, pool, w)
	}
	return wait(ctx, l, pool, &waiter{ch: make(chan struct{}, 1)})
}

// Pool is what [Acquire] takes a connection from.
type Pool[C any] interface {
	Acquire(ctx context.Context) (C, error)
}

// mustWait reports whether an acquire that failed with err waits for a
// held connection: the limit or the pacer held its connect back, or the
// server refused it for lack of slots while the pool holds connections.
func (l *Limit) mustWait(ctx context.Context, err error) bool {
	switch {
	case errors.Is(err, ErrNoSlot), errors.Is(err, errPaced):
		return true
	case errors.Is(err, errGrow):
		l.grow(waiterOf(ctx))
		return true
	case classify.NoSlot(err):
		l.pace.done() // the refused connect is no longer in flight
		held := l.established()
		l.refuse(ctx, held, err)
		return held > 0
	}
	return false
}

// wait is Acquire's slow path: it waits in the queue as w, and tries
// again when a release wakes it, or a poll while it is first.
func wait[C any, P Pool[C]](ctx context.Context, l *Limit, pool P, w *waiter) (c C, err error) {
	start := l.s.Now()
	// A connect the acquire goes on to make takes w out of the turns of
	// the releases' wakes ([Limit.Connecting]).
	wctx := context.WithValue(ctx, waiterKey{}, w)
	if l.enqueue(w) && !l.full() {
		w.wake() // first: a release may have come since the last try
	}
	defer func() {
		l.leave(w)
		d := l.s.Now().Sub(start)
		l.waits.Add(1)
		l.waitNanos.Add(int64(d))
		l.trace(ctx, Data{Event: Waited, Limit: l.Stats().Limit, Held: l.held(), Wait: d})
	}()
	poll := pollMin
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var tick <-chan time.Time
		if l.first(w) {
			if timer == nil {
				timer = time.NewTimer(poll)
			} else {
				timer.Reset(poll)
			}
			tick = timer.C
		}
		select {
		case <-w.ch:
			if l.full() {
				continue // first now, or woken for a connection taken
			}
		case <-tick:
			poll = min(2*poll, pollMax)
			if l.full() {
				continue
			}
		case <-ctx.Done():
			var zero C
			return zero, ctx.Err()
		}
		if l.growsFor(wctx) {
			continue // nothing idle: the pool grows for it
		}
		c, err = pool.Acquire(wctx)
		l.connected(w)
		if err == nil || !l.mustWait(wctx, err) {
			return c, err
		}
		switch {
		case errors.Is(err, errPaced), errors.Is(err, errGrow):
			w.paced()
		case !errors.Is(err, ErrNoSlot):
			poll = pollMin // refused: the held connections come back soon
		}
	}
}
