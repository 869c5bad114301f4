package slotlimit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestPacedAcquireTakesARelease: an acquire whose connect the pacer holds
// back, on a pool that holds a connection, does not wait for its own
// connect: it takes the first connection released. A pool that starts
// under a burst serves it from the connections it has while it grows.
func TestPacedAcquireTakesARelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFakePool(4, &fakeServer{free: 10})
		p.connectTime = 300 * time.Millisecond
		held := hold(t, p, 1)
		ctx := WaitForHeld(t.Context())
		growing := make(chan conn, 1)
		go func() { // the pool's second connect, in flight
			c, err := Acquire[conn](ctx, p.limit, p)
			if err != nil {
				t.Error(err)
			}
			growing <- c
		}()
		synctest.Wait()
		type result struct {
			c   conn
			err error
			at  time.Duration
		}
		start := time.Now()
		got := make(chan result, 1)
		go func() {
			c, err := Acquire[conn](ctx, p.limit, p)
			got <- result{c, err, time.Since(start)}
		}()
		time.Sleep(20 * time.Millisecond)
		p.release(held[0])
		r := <-got
		if r.err != nil || r.c != held[0] || r.at > 25*time.Millisecond {
			t.Errorf("acquire = %v, %v after %v; want the connection released at 20ms, at once", r.c, r.err, r.at)
		}
		p.release(<-growing)
		p.release(r.c)
	})
}

// TestConnectingWaiterYieldsTheHead: the first waiter in the queue that
// goes on to connect (its connect paced in) waits for that connect, and
// no longer takes the wakes of releases: the next waiter does, and takes
// the connection released meanwhile.
func TestConnectingWaiterYieldsTheHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFakePool(8, &fakeServer{free: 10})
		p.connectTime = 300 * time.Millisecond
		held := hold(t, p, 2)
		ctx := WaitForHeld(t.Context())
		grown := make(chan conn, 3)
		go func() { // a connect in flight: the two that follow are paced
			c, _ := Acquire[conn](ctx, p.limit, p)
			grown <- c
		}()
		synctest.Wait()
		type result struct {
			c   conn
			err error
		}
		first := make(chan result, 1)
		go func() {
			c, err := Acquire[conn](ctx, p.limit, p)
			first <- result{c, err}
		}()
		synctest.Wait()
		second := make(chan result, 1)
		go func() {
			c, err := Acquire[conn](ctx, p.limit, p)
			second <- result{c, err}
		}()
		synctest.Wait()
		// paceMax passes without a release: the first waiter connects,
		// for 300ms, while the second is paced in its turn.
		time.Sleep(150 * time.Millisecond)
		synctest.Wait()
		if s, c := p.stat(); s != 4 || c != 2 {
			t.Fatalf("the pool holds %d connections, %d connecting; want 4: 2 held, 2 connecting", s, c)
		}
		released := time.Now()
		p.release(held[0])
		var r result
		select {
		case r = <-second:
		case r = <-first:
			t.Fatalf("the first waiter returned %v, %v; want it connecting", r.c, r.err)
		}
		if r.err != nil || r.c != held[0] || time.Since(released) > 5*time.Millisecond {
			t.Errorf("second waiter = %v, %v after %v; want the released %v at once", r.c, r.err, time.Since(released), held[0])
		}
		r1 := <-first
		for _, c := range []conn{r.c, r1.c, held[1], <-grown} {
			p.release(c)
		}
	})
}

// TestPacedProbeStaysDue: a try beyond the limit that the pacing holds
// back is not made, and is not counted: the next acquire makes it.
func TestPacedProbeStaysDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 2 held, 1 connecting, and this connect.
		l := New(Settings{Max: 4, Stat: func() (int, int) { return 4, 2 }, Every: time.Second,
			Jitter: func() float64 { return 0.5 }, Now: time.Now})
		l.refuse(t.Context(), 2, refusal)
		time.Sleep(200 * time.Millisecond) // past the first probe's 125ms
		if err := l.Connecting(WaitForHeld(t.Context())); !errors.Is(err, errPaced) {
			t.Fatalf("Connecting = %v, want errPaced", err)
		}
		if !l.due(time.Now()) || l.Stats().Probes != 0 {
			t.Errorf("due %v, %d probes; want the try still due, none counted", l.due(time.Now()), l.Stats().Probes)
		}
	})
}

// TestPacedAcquireConnectsAfterPaceMax: a paced acquire that no release
// serves gets a connection after paceMax, as any paced connect does: a
// connect in flight that hangs (a server gone slow) and connections held
// by calls that do not return must not hold it until its context ends.
// Without Settings.Grow it connects itself; with it, the pool connects in
// the background and the acquire takes that connection.
func TestPacedAcquireConnectsAfterPaceMax(t *testing.T) {
	for _, grow := range []bool{false, true} {
		t.Run(fmt.Sprintf("grow=%v", grow), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newFakePoolGrowing(4, &fakeServer{free: 10}, grow)
				defer p.limit.Close()
				held := hold(t, p, 1)
				p.setConnectTime(5 * time.Second)
				ctx, cancel := context.WithTimeout(WaitForHeld(t.Context()), time.Second)
				defer cancel()
				hung := make(chan conn, 1)
				go func() { // the pool's second connect, hung
					c, _ := Acquire[conn](t.Context(), p.limit, p)
					hung <- c
				}()
				synctest.Wait()
				p.setConnectTime(time.Millisecond)
				start := time.Now()
				c, err := Acquire[conn](ctx, p.limit, p)
				if at := time.Since(start); err != nil || c == held[0] || at > paceMax+pollMax+2*time.Millisecond {
					t.Errorf("acquire = %v, %v after %v; want a new connection after %v", c, err, at, paceMax)
				}
				p.release(held[0])
				p.release(c)
				p.release(<-hung)
			})
		})
	}
}
