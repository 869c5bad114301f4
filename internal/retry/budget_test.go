package retry

import (
	"fmt"
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

// TestBudgetPace: a paced retry is never refused. It takes what the budget
// allows at once (the successes' share, then the floor's bucket), then
// borrows the bucket's next tokens and waits for each, at most one bucket
// ahead, so that the wait never grows past a bucket's time; without a floor
// nothing paces.
func TestBudgetPace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBudget(0.2, 10, 10*time.Second, t0)
	for range 10 {
		b.Success(t0)
	}
	var waits []time.Duration
	for range 25 {
		waits = append(waits, b.Pace(t0))
	}
	want := []time.Duration{0, 0, // the successes' share: 20% of 10
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // the full bucket
	}
	for i := 1; i <= 10; i++ { // borrowed: each 100ms after the one before
		want = append(want, time.Duration(i)*100*time.Millisecond)
	}
	want = append(want, time.Second, time.Second, time.Second) // one bucket ahead at most
	if fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Errorf("waits %v\nwant  %v", waits, want)
	}
	if b.Withdraw(t0.Add(time.Second)) {
		t.Error("a retry that can be refused was allowed while the bucket is lent ahead")
	}
	if w := b.Pace(t0.Add(2 * time.Second)); w != 0 {
		t.Errorf("after the bucket refilled, a paced retry waits %v, want 0", w)
	}
	if w := NewBudget(0.2, 0, 10*time.Second, t0).Pace(t0); w != 0 {
		t.Errorf("without a floor, a paced retry waits %v, want 0", w)
	}
}
