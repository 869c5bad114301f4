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

// leave takes w out of the queue. When w was first, the next one is woken:
// it looks at the pool at once, and polls from then on. A wake w took with
// it, for a connection it did not take (two came back at once, or its
// context ended), is not lost, and a waiter that becomes first does not
// wait for a release without its poll.
func (l *Limit) leave(w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, q := range l.queue {
		if q == w {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			l.waiting.Add(-1)
			if i == 0 && len(l.queue) > 0 {
				l.queue[0].wake()
			}
			return
		}
	}
}
