package rolling

import (
	"testing"
	"time"
)

// TestWindow: counts stay while their slice is inside the window and drop
// out slice by slice after it; Reset forgets them; time before the start
// counts in its own slices.
func TestWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var w Window
	w.Init(10*time.Second, t0)
	w.Add(t0, 1, 2, 3)
	w.Add(t0.Add(4*time.Second), 10, 0, 0)
	tests := []struct {
		at      time.Duration
		a, b, c int64
	}{
		{0, 1, 2, 3},
		{4 * time.Second, 11, 2, 3},
		{9*time.Second + 999*time.Millisecond, 11, 2, 3},
		{10 * time.Second, 10, 0, 0}, // the first slice left the window
		{14 * time.Second, 0, 0, 0},
		{time.Hour, 0, 0, 0},
	}
	for _, tt := range tests {
		a, b, c := w.Sums(t0.Add(tt.at))
		if a != tt.a || b != tt.b || c != tt.c {
			t.Errorf("at +%v: sums %d %d %d, want %d %d %d", tt.at, a, b, c, tt.a, tt.b, tt.c)
		}
	}
	// A slice reused after a full turn starts from zero.
	w.Add(t0.Add(20*time.Second), 5, 0, 0)
	if a, _, _ := w.Sums(t0.Add(20 * time.Second)); a != 5 {
		t.Errorf("a reused slice: %d, want 5", a)
	}
	w.Reset(t0.Add(20 * time.Second))
	if a, b, c := w.Sums(t0.Add(20 * time.Second)); a+b+c != 0 {
		t.Errorf("after Reset: %d %d %d", a, b, c)
	}
	w.Add(t0.Add(19*time.Second), 7, 0, 0) // before the new start
	if a, _, _ := w.Sums(t0.Add(19 * time.Second)); a != 7 {
		t.Errorf("a count before the start: %d, want 7", a)
	}
}

// TestTinyWindow: a window shorter than its slices still counts.
func TestTinyWindow(t *testing.T) {
	t0 := time.Unix(0, 0)
	var w Window
	w.Init(5, t0)
	w.Add(t0, 1, 0, 0)
	if a, _, _ := w.Sums(t0); a != 1 {
		t.Errorf("sums %d, want 1", a)
	}
}
