package slotlimit

import (
	"context"
	"sync/atomic"
	"time"
)

// waiter is an acquire waiting for a held connection.
type waiter struct {
	ch chan struct{} // receives a wake; holds one
	// connecting: the acquire is making a connect and waits for it; the
	// wakes of releases go to the next waiter. Guarded by the Limit's mu.
	connecting bool
	// pacedAt is when the pacer first held its connect back (unix
	// nanoseconds; 0: never): paceMax after, the pacer lets it go.
	pacedAt atomic.Int64
	// grew: the acquire asked for a background connect ([Limit.grow])
	// and may start none beyond the bound. Guarded by the Limit's mu.
	grew bool
}

// waiterOf returns the waiter of ctx's acquire, or nil.
func waiterOf(ctx context.Context) *waiter {
	w, _ := ctx.Value(waiterKey{}).(*waiter)
	return w
}

// paced notes that the pacer held w's connect back, the first time.
func (w *waiter) paced() { w.pacedAt.CompareAndSwap(0, time.Now().UnixNano()) }

// pacedFor returns how long ctx's waiter has been held back by the pacer
// (0: it is not a waiter, or never was).
func pacedFor(ctx context.Context) time.Duration {
	w := waiterOf(ctx)
	if w == nil {
		return 0
	}
	at := w.pacedAt.Load()
	if at == 0 {
		return 0
	}
	return time.Duration(time.Now().UnixNano() - at)
}

// waiterKey is the context key of the waiter an acquire's connect is
// made for.
type waiterKey struct{}

func (w *waiter) wake() {
	select {
	case w.ch <- struct{}{}:
	default: // already woken
	}
}

// head returns the waiter that takes the next wake, the first that is not
// connecting; l.mu is held.
func (l *Limit) head() *waiter {
	for _, w := range l.queue {
		if !w.connecting {
			return w
		}
	}
	return nil
}

// wakeHead wakes the head; l.mu is held.
func (l *Limit) wakeHead() {
	if h := l.head(); h != nil {
		h.wake()
	}
}

// enqueue adds w at the queue's end, and reports whether it is the head.
func (l *Limit) enqueue(w *waiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queue = append(l.queue, w)
	l.waiting.Add(1)
	return l.head() == w
}

// first reports whether w is the head: the waiter that polls.
func (l *Limit) first(w *waiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.head() == w
}

// connecting says that the acquire of ctx's waiter, if any, makes a
// connect: the next waiter takes the wakes of releases, and polls, until
// that connect ends ([Limit.connected]).
func (l *Limit) connecting(ctx context.Context) {
	w, ok := ctx.Value(waiterKey{}).(*waiter)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !w.connecting {
		w.connecting = true
		l.wakeHead()
	}
}

// connected says that w's acquire is no longer connecting.
func (l *Limit) connected(w *waiter) {
	l.mu.Lock()
	w.connecting = false
	l.mu.Unlock()
}

// leave takes w out of the queue. When w was the head, the next one is
// woken: it looks at the pool at once, and polls from then on. A wake w
// took with it, for a connection it did not take (two came back at once,
// or its context ended), is not lost, and a waiter that becomes the head
// does not wait for a release without its poll.
func (l *Limit) leave(w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	wasHead := l.head() == w
	for i, q := range l.queue {
		if q == w {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			l.waiting.Add(-1)
			if wasHead {
				l.wakeHead()
			}
			return
		}
	}
}
