package retry

import (
	"testing"
	"time"
)

func TestBudgetFloor(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBudget(0.2, 10, 10*time.Second, t0)
	// A new pool may retry one second's worth of the floor (10) at once...
	for i := range 10 {
		if !b.Withdraw(t0) {
			t.Fatalf("retry %d refused", i+1)
		}
	}
	if b.Withdraw(t0) {
		t.Fatal("the 11th retry at once was allowed")
	}
	// ...then 10 per second.
	if !b.Withdraw(t0.Add(100*time.Millisecond)) || b.Withdraw(t0.Add(100*time.Millisecond)) {
		t.Error("after 100ms exactly one more retry must be allowed")
	}
}

func TestBudgetRatio(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBudget(0.2, 0, 10*time.Second, t0) // no floor
	if b.Withdraw(t0) {
		t.Fatal("no successes, no floor: a retry was allowed")
	}
	for range 50 {
		b.Success(t0)
	}
	allowed := 0
	for b.Withdraw(t0.Add(time.Second)) {
		allowed++
	}
	if allowed != 10 {
		t.Errorf("50 successes allow %d retries, want 10 (20%%)", allowed)
	}
	// The successes leave the window after 10s.
	for range 50 {
		b.Success(t0.Add(2 * time.Second))
	}
	if !b.Withdraw(t0.Add(11 * time.Second)) {
		t.Error("successes 9s ago must still count")
	}
	if b.Withdraw(t0.Add(13 * time.Second)) {
		t.Error("successes 11s ago must not count")
	}
}
