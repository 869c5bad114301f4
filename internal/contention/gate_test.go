package contention

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// TestGateOldestFirst: waiters are let in oldest call first, as
// slots free, and a waiter whose context ends leaves no slot taken.
func TestGateOldestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := bubbleGate(t, 1)
		ctx := context.Background()
		first, err := g.Admit(ctx, 0, 0)
		if err != nil || !first.Held {
			t.Fatalf("admit on a free limit: %+v, %v", first, err)
		}
		order := make(chan int64, 3)
		cctx, cancel := context.WithCancel(ctx)
		cancelled := make(chan error, 1)
		go func() {
			_, err := g.Admit(cctx, 5, 0)
			cancelled <- err
		}()
		for _, prio := range []int64{30, 10, 20} {
			go func() {
				adm, err := g.Admit(ctx, prio, 0)
				if err != nil {
					t.Errorf("admit(%d): %v", prio, err)
					return
				}
				order <- prio
				g.Done(ctx, adm, Committed, time.Millisecond)
			}()
			synctest.Wait()
		}
		cancel()
		if err := <-cancelled; !errors.Is(err, context.Canceled) {
			t.Fatalf("a waiter whose context ended got %v", err)
		}
		if s := g.stats(); s.Waiting != 3 || s.Running != 1 {
			t.Fatalf("stats %+v, want 3 waiting and 1 running", s)
		}
		g.Done(ctx, first, Committed, time.Millisecond)
		var got []int64
		for range 3 {
			got = append(got, <-order)
		}
		if want := []int64{10, 20, 30}; !slices.Equal(got, want) {
			t.Errorf("admitted in order %v, want %v (oldest first)", got, want)
		}
		synctest.Wait()
		if s := g.stats(); s.Waiting != 0 || s.Running != 0 || g.running != 0 {
			t.Errorf("after every attempt ended: %+v, %d slots taken", s, g.running)
		}
		// One admission at once, three after a wait, one wait given up.
		if n := g.stats().Wait.Count; n != 5 {
			t.Errorf("%d waits recorded, want 5", n)
		}
	})
}

// TestGateDeadline: a wait at the gate counts against the caller's
// deadline. An attempt that could not finish in the time left (by the
// label's mean attempt time) is refused at once; one that waits gives up
// when only that much time is left, and the acquire timeout bounds the
// wait too.
func TestGateDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := bubbleGate(t, 1)
		g.meanAttempt = 20 * time.Millisecond
		ctx := context.Background()
		hold, _ := g.Admit(ctx, 0, 0)

		short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := g.Admit(short, 1, 0); !errors.Is(err, ErrAdmissionDeadline) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("admit with 10ms left and 20ms attempts: %v, want the deadline error", err)
		}
		if time.Since(start) != 0 {
			t.Errorf("refused after %v, want at once", time.Since(start))
		}

		long, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel2()
		start = time.Now()
		if _, err := g.Admit(long, 1, 0); !errors.Is(err, ErrAdmissionDeadline) {
			t.Errorf("admit with 100ms left: %v, want the deadline error", err)
		}
		if got := time.Since(start); got != 80*time.Millisecond {
			t.Errorf("gave up after %v, want 80ms (the deadline less one mean attempt)", got)
		}

		g.m.acquireTimeout = 30 * time.Millisecond
		long, cancel3 := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel3()
		start = time.Now()
		if _, err := g.Admit(long, 1, 0); !errors.Is(err, errTestTimeout) {
			t.Errorf("admit bounded by a 30ms acquire timeout: %v, want the acquire timeout's error", err)
		}
		if got := time.Since(start); got != 30*time.Millisecond {
			t.Errorf("gave up after %v, want 30ms", got)
		}
		g.Done(ctx, hold, Committed, time.Millisecond)
		if s := g.stats(); s.Running != 0 || s.Waiting != 0 {
			t.Errorf("after the waits: %+v", s)
		}
	})
}

// TestGateStarvingCallRunsAlone: a call that lost three times in a
// row is let in only when nothing else of the label runs, and nothing is
// let in beside it, so the database cannot make it lose again.
func TestGateStarvingCallRunsAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := bubbleGate(t, 2)
		ctx := context.Background()
		first, _ := g.Admit(ctx, 0, 0)
		order := make(chan string, 2)
		alone := make(chan Admission, 1)
		go func() {
			a, err := g.Admit(ctx, 5, starving)
			if err != nil {
				t.Errorf("exclusive admit: %v", err)
			}
			order <- "exclusive"
			alone <- a
		}()
		synctest.Wait()
		go func() {
			a, err := g.Admit(ctx, 10, 0)
			if err != nil {
				t.Errorf("admit: %v", err)
			}
			order <- "newer"
			g.Done(ctx, a, Committed, time.Millisecond)
		}()
		synctest.Wait()
		if s := g.stats(); s.Waiting != 2 || s.Running != 1 {
			t.Fatalf("with one attempt running and a limit of 2: %+v; want both waiting (the exclusive one for the running one, the newer one behind it)", s)
		}
		g.Done(ctx, first, Committed, time.Millisecond)
		synctest.Wait()
		if got := <-order; got != "exclusive" {
			t.Fatalf("%s let in first, want the exclusive call", got)
		}
		if s := g.stats(); s.Waiting != 1 || s.Running != 1 {
			t.Fatalf("while the exclusive attempt runs: %+v; want the newer one still waiting", s)
		}
		g.Done(ctx, <-alone, Committed, time.Millisecond)
		if got := <-order; got != "newer" {
			t.Fatalf("%s, want the newer call after the exclusive one", got)
		}
	})
}

// TestGateExclusiveAfterStarving: only a call that lost starving times in
// a row, or more, is admitted alone.
func TestGateExclusiveAfterStarving(t *testing.T) {
	tests := []struct {
		lost  int
		alone bool
	}{
		{lost: 0}, {lost: starving - 1}, {lost: starving, alone: true}, {lost: starving + 1, alone: true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("lost %d", tt.lost), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := bubbleGate(t, 2)
				ctx := context.Background()
				first, _ := g.Admit(ctx, 0, 0)
				second := make(chan Admission, 1)
				go func() {
					a, _ := g.Admit(ctx, 1, tt.lost)
					second <- a
				}()
				synctest.Wait()
				if s := g.stats(); s.Waiting != b2i(tt.alone) {
					t.Errorf("beside a running attempt, with room for two: %d waiting, want %d", s.Waiting, b2i(tt.alone))
				}
				g.Done(ctx, first, Committed, time.Millisecond)
				g.Done(ctx, <-second, Committed, time.Millisecond)
			})
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
