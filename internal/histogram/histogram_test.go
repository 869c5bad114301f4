package histogram

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// TestObserve: each duration lands in the first bucket whose bound holds
// it, a bound itself included, and above the last bound in the last.
func TestObserve(t *testing.T) {
	tests := []struct {
		d      time.Duration
		bucket int
	}{
		{0, 0},
		{time.Millisecond, 0},
		{time.Millisecond + 1, 1},
		{7 * time.Millisecond, 3},
		{10 * time.Second, len(Bounds) - 1},
		{time.Minute, len(Bounds)},
	}
	for _, tt := range tests {
		var h Live
		h.Observe(tt.d)
		want := make([]int64, len(Bounds)+1)
		want[tt.bucket] = 1
		s := h.Snapshot()
		if !slices.Equal(s.Buckets, want) || s.Count != 1 || s.Duration != tt.d || s.Max != tt.d {
			t.Errorf("Observe(%v): %+v, want one observation in bucket %d", tt.d, s, tt.bucket)
		}
	}
}

// TestSnapshot: the counts, the total, the longest and the bounds.
func TestSnapshot(t *testing.T) {
	var h Live
	if s := h.Snapshot(); s.Count != 0 || s.Duration != 0 || s.Max != 0 || len(s.Buckets) != len(Bounds)+1 || len(s.Bounds) != len(Bounds) {
		t.Errorf("empty: %+v", s)
	}
	for _, d := range []time.Duration{3 * time.Millisecond, time.Second, 2 * time.Millisecond} {
		h.Observe(d)
	}
	s := h.Snapshot()
	if s.Count != 3 || s.Duration != time.Second+5*time.Millisecond || s.Max != time.Second || !slices.Equal(s.Bounds, Bounds[:]) {
		t.Errorf("%+v", s)
	}
	s.Buckets[0] = 99
	if h.Snapshot().Buckets[0] == 99 {
		t.Error("a snapshot shares its buckets with the live histogram")
	}
}

// TestObserveConcurrently: observations racing each other are all
// counted, and the longest wins.
func TestObserveConcurrently(t *testing.T) {
	var h Live
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				h.Observe(time.Duration(g*100+i) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	s := h.Snapshot()
	var n int64
	for _, c := range s.Buckets {
		n += c
	}
	if s.Count != 800 || n != 800 || s.Max != 799*time.Millisecond {
		t.Errorf("count %d, in buckets %d, max %v; want 800, 800, 799ms", s.Count, n, s.Max)
	}
}
