package slotlimit

// waiter is an acquire waiting for a held connection.
type waiter struct {
	ch chan struct{} // receives a wake; holds one
}

func (w *waiter) wake() {
	select {
	case w.ch <- struct{}{}:
	default: // already woken
	}
}

// enqueue adds w at the queue's end, and reports whether it is first.
func (l *Limit) enqueue(w *waiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queue = append(l.queue, w)
	l.waiting.Add(1)
	return len(l.queue) == 1
}

// first reports whether w is the first in the queue.
func (l *Limit) first(w *waiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue) > 0 && l.queue[0] == w
}

// leave takes w out of the queue; with passOn, the next one, if any,
// tries at once: the wake w took was for a connection it no longer wants.
func (l *Limit) leave(w *waiter, passOn bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, q := range l.queue {
		if q == w {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			l.waiting.Add(-1)
			break
		}
	}
	if passOn && len(l.queue) > 0 {
		l.queue[0].wake()
	}
}
