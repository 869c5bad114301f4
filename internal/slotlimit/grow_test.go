package slotlimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestStartingPoolServesFromItsFirstConnection: a pool starting under a
// burst whose connects beyond the first are slow (a fleet starting
// together, a server gone slow) serves the burst from its first
// connection, in turns: no acquire waits for a connect of its own while a
// connection is in the pool or on its way, and the pool still grows, in
// the background. (Without Settings.Grow, the code before, the acquires
// paced behind the first connect made their own after 100ms, which took
// longer than their 2s deadline: 3 of 4 failed.)
func TestStartingPoolServesFromItsFirstConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFakePoolGrowing(4, &fakeServer{free: 10}, true)
		defer p.limit.Close()
		p.setConnectTime(100 * time.Millisecond)
		errs := make(chan error, 4)
		call := func() {
			ctx, cancel := context.WithTimeout(WaitForHeld(t.Context()), 2*time.Second)
			defer cancel()
			c, err := Acquire[conn](ctx, p.limit, p)
			if err == nil {
				time.Sleep(10 * time.Millisecond) // the transaction
				p.release(c)
			}
			errs <- err
		}
		go call()
		synctest.Wait() // the first connect is in flight
		p.setConnectTime(3 * time.Second)
		for range 3 {
			go call()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Errorf("acquire: %v; want the first connection, in turn", err)
			}
		}
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if total, connecting := p.stat(); total < 2 || connecting != 0 {
			t.Errorf("the pool holds %d connections, %d connecting; want it grown in the background", total, connecting)
		}
	})
}

// TestGrowStopsAtClose: Close ends the connects the limit makes in the
// background and waits for them; a grow after Close makes none.
func TestGrowStopsAtClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var grows atomic.Int32
		l := New(Settings{Max: 4, Stat: func() (int, int) { return 2, 0 }, Every: time.Second, Now: time.Now,
			Grow: func(ctx context.Context) error {
				grows.Add(1)
				<-ctx.Done()
				return ctx.Err()
			}})
		l.grow(nil)
		synctest.Wait()
		l.Close()
		l.grow(&waiter{})
		synctest.Wait()
		if grows.Load() != 1 {
			t.Errorf("%d grows, want 1", grows.Load())
		}
	})
}

// TestGrowBounded: at most half as many background connects as the pool
// holds go at once, and at least one; while they hang, a waiter that
// started none may start one, paceMax after the last.
func TestGrowBounded(t *testing.T) {
	for _, tc := range []struct{ held, want int }{{0, 1}, {1, 1}, {4, 2}, {10, 5}} {
		t.Run(fmt.Sprint(tc.held), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				var started atomic.Int32
				l := New(Settings{Max: 100, Stat: func() (int, int) { return tc.held, 0 }, Every: time.Second, Now: time.Now,
					Grow: func(ctx context.Context) error {
						started.Add(1)
						<-release
						return nil
					}})
				w1, w2 := &waiter{}, &waiter{}
				for range 20 {
					l.grow(nil)
				}
				synctest.Wait()
				if int(started.Load()) != tc.want {
					t.Errorf("%d grows at once, want %d", started.Load(), tc.want)
				}
				// Those in flight hang: paceMax after the last, each waiter
				// may start one more, paceMax apart.
				time.Sleep(paceMax)
				for range 20 {
					l.grow(nil)
					l.grow(w1)
					l.grow(w2)
				}
				synctest.Wait()
				if int(started.Load()) != tc.want+1 {
					t.Errorf("%d grows after paceMax, want %d", started.Load(), tc.want+1)
				}
				time.Sleep(paceMax)
				l.grow(w1) // it had its one
				l.grow(w2)
				synctest.Wait()
				if int(started.Load()) != tc.want+2 {
					t.Errorf("%d grows after 2 paceMax, want %d", started.Load(), tc.want+2)
				}
				close(release)
				l.Close()
			})
		})
	}
}

// TestProbeGoesInTheBackground: on a pool the server refused, a try beyond
// the limit that falls due while a Transaction waits is made in the
// background: the acquire takes a connection released meanwhile instead
// of waiting for a connect that a server without slots can make slow, and
// a probe that connects still raises the limit.
func TestProbeGoesInTheBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server := &fakeServer{free: 2}
		p := newFakePoolGrowing(4, server, true)
		defer p.limit.Close()
		held := hold(t, p, 2)
		refused, cancelRefused := context.WithTimeout(WaitForHeld(t.Context()), 50*time.Millisecond)
		defer cancelRefused()
		if _, err := Acquire[conn](refused, p.limit, p); err == nil || p.limit.Stats().Limit != 2 {
			t.Fatalf("third acquire: %v, limit %d; want it refused while 2 are held, waiting, limit 2", err, p.limit.Stats().Limit)
		}
		server.mu.Lock()
		server.free = 1 // a slot frees up
		server.mu.Unlock()
		p.setConnectTime(3 * time.Second)
		time.Sleep(time.Second) // the next try is due
		go func() {
			time.Sleep(500 * time.Millisecond)
			p.release(held[0])
		}()
		ctx, cancel := context.WithTimeout(WaitForHeld(t.Context()), 2*time.Second)
		defer cancel()
		start := time.Now()
		c, err := Acquire[conn](ctx, p.limit, p)
		if err != nil || c != held[0] || time.Since(start) > 501*time.Millisecond {
			t.Errorf("acquire = %v, %v after %v; want %v released at 500ms", c, err, time.Since(start), held[0])
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if s := p.limit.Stats(); s.Limit != 3 || s.Probes != 1 {
			t.Errorf("limit %d after %d probes; want the background probe to raise it to 3", s.Limit, s.Probes)
		}
		p.release(c)
		p.release(held[1])
	})
}

// TestWaiterLeavesAnEmptyPoolAlone: a Transaction waiting for a held
// connection does not try the pool while none is idle and the pool grows
// for it: each try would make the pool start a connect that the pacer
// turns back. (Without Settings.Idle, the first waiter tried at every
// poll: 28 connects started in a second.)
func TestWaiterLeavesAnEmptyPoolAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFakePoolGrowing(8, &fakeServer{free: 10}, true)
		defer p.limit.Close()
		held := hold(t, p, 2)
		p.setConnectTime(5 * time.Second) // the growth hangs
		ctx, cancel := context.WithTimeout(WaitForHeld(t.Context()), time.Second)
		defer cancel()
		errs := make(chan error, 3)
		for range 3 {
			go func() {
				_, err := Acquire[conn](ctx, p.limit, p)
				errs <- err
			}()
		}
		for range 3 {
			<-errs
		}
		p.mu.Lock()
		attempts := p.attempts
		p.mu.Unlock()
		// 2 held, at most one turned back per acquire as it came, and the
		// background connects: one, then one more per waiter paceMax
		// apart.
		if attempts > 2+3+4 {
			t.Errorf("%d connects started, want at most 9", attempts)
		}
		p.release(held[0])
		p.release(held[1])
		time.Sleep(5 * time.Second)
	})
}
