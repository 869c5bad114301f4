package fakeclock

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestSleepAndDeadline: sleeping moves the clock at once; a pause past a
// context's deadline stops at the deadline with its error, after which
// the context is done.
func TestSleepAndDeadline(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := &Clock{T: t0}
	ctx := Deadline(c, 150*time.Millisecond)
	if err := c.Sleep(ctx, 100*time.Millisecond); err != nil || ctx.Err() != nil {
		t.Fatalf("a pause within the deadline: %v, %v", err, ctx.Err())
	}
	select {
	case <-ctx.Done():
		t.Fatal("done before the deadline")
	default:
	}
	if err := c.Sleep(ctx, 100*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a pause past the deadline: %v", err)
	}
	if got, want := c.Sleeps, []time.Duration{100 * time.Millisecond, 50 * time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("Sleeps = %v, want %v", got, want)
	}
	if !c.Now().Equal(t0.Add(150 * time.Millisecond)) {
		t.Errorf("Now = %v, want the deadline", c.Now())
	}
	<-ctx.Done()
	if err := c.Sleep(ctx, time.Millisecond); !errors.Is(err, context.DeadlineExceeded) || len(c.Sleeps) != 2 {
		t.Errorf("a pause after the deadline: %v, %d pauses", err, len(c.Sleeps))
	}
	if d, ok := ctx.Deadline(); !ok || !d.Equal(t0.Add(150*time.Millisecond)) {
		t.Errorf("Deadline = %v, %v", d, ok)
	}
}
