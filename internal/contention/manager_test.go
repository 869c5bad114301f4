package contention

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestManagerLabels: each label has a gate of its own, up to a bound
// past which labels share the empty label's; Stats lists them in order.
func TestManagerLabels(t *testing.T) {
	m := New(testSettings(&fakeClock{}, 8, nil))
	if a, again := m.Gate("a"), m.Gate("a"); a != again || a == m.Gate("b") || m.Gate("") != &m.def {
		t.Fatal("one gate per label")
	}
	for i := range maxLabels + 10 {
		m.Gate(fmt.Sprintf("l%03d", i))
	}
	if got := m.Gate("one too many"); got != &m.def {
		t.Error("a label past the bound must share the empty label's gate")
	}
	s := m.Stats()
	if len(s) != maxLabels+1 || s[0].Label != "" || s[1].Label != "a" || s[2].Label != "b" {
		t.Errorf("%d entries, first %q %q %q", len(s), s[0].Label, s[1].Label, s[2].Label)
	}
}

// TestManagerCloseLetsWaitersGo: closing the pool opens every gate, so
// no caller stays waiting.
func TestManagerCloseLetsWaitersGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New(testSettings(realClock{}, 4, nil))
		g := m.Gate("x")
		engage(g, 1)
		ctx := context.Background()
		hold, _ := g.Admit(ctx, 0, 0)
		got := make(chan error, 1)
		go func() {
			a, err := g.Admit(ctx, 1, 0)
			g.Done(ctx, a, Committed, 0)
			got <- err
		}()
		synctest.Wait()
		m.Close()
		if err := <-got; err != nil {
			t.Errorf("a waiter after close: %v", err)
		}
		g.Done(ctx, hold, Committed, 0)
		if s := g.stats(); s.Limiting || s.Running != 0 || s.Waiting != 0 {
			t.Errorf("after close: %+v", s)
		}
	})
}

// TestGateCountsOutcomes: every attempt counts, a commit and a conflict
// each in their own count, and another failure in neither.
func TestGateCountsOutcomes(t *testing.T) {
	tests := []struct {
		o                  Outcome
		commits, conflicts int64
	}{
		{o: Committed, commits: 1},
		{o: Conflict, conflicts: 1},
		{o: Failed},
	}
	for _, tt := range tests {
		for _, limiting := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d limiting %v", tt.o, limiting), func(t *testing.T) {
				g, _, _ := newTestGate(t, 4)
				if limiting {
					engage(g, 2)
				}
				ctx := context.Background()
				a, err := g.Admit(ctx, 0, 0)
				if err != nil || a.Held != limiting {
					t.Fatalf("admit: %+v, %v", a, err)
				}
				g.Done(ctx, a, tt.o, time.Millisecond)
				s := g.stats()
				if s.Attempts != 1 || s.Commits != tt.commits || s.Conflicts != tt.conflicts || s.Running != 0 {
					t.Errorf("stats %+v, want 1 attempt, %d commits, %d conflicts", s, tt.commits, tt.conflicts)
				}
			})
		}
	}
}
