package slotlimit

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestNoWakeIsLost: two connections come back before the first waiter
// runs, so that it takes one wake too many with it when it leaves. The
// next waiter, first now, still takes the other connection: it does not
// wait for a release that may never come.
func TestNoWakeIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server := &fakeServer{free: 2}
		p := newFakePool(4, server)
		held := hold(t, p, 2)
		type result struct {
			c   conn
			err error
		}
		first := make(chan result, 1)
		go func() {
			c, err := Acquire[conn](t.Context(), p.limit, p)
			first <- result{c, err}
		}()
		time.Sleep(10 * time.Millisecond) // refused, and first in the queue
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		second := make(chan result, 1)
		go func() {
			c, err := Acquire[conn](ctx, p.limit, p)
			second <- result{c, err}
		}()
		synctest.Wait() // waiting behind the first
		// Both come back while the first cannot take either yet: it is
		// woken twice, or once for both.
		p.mu.Lock()
		p.limit.Released()
		p.limit.Released()
		p.idle = append(p.idle, held...)
		close(p.freed)
		p.freed = make(chan struct{})
		p.mu.Unlock()
		r := <-first
		if r.err != nil {
			t.Fatalf("first waiter: %v", r.err)
		}
		r = <-second
		if r.err != nil {
			t.Fatalf("second waiter: %v while a connection sat idle in the pool", r.err)
		}
	})
}
