package acquire

import (
	"testing"
	"time"
)

// TestInFlight follows attempts taking and releasing connections: the set
// counts those holding one and the age of the oldest, reuses freed slots,
// and adds up the releases and their hold times.
func TestInFlight(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type step struct {
		name string
		// add is when an attempt named name takes a connection; zero:
		// name's releases it, after held.
		add  time.Time
		held time.Duration

		now        time.Time // when the snapshot is taken
		wantN      int
		wantOldest time.Duration
	}
	steps := []step{
		{name: "a", add: at(0), now: at(0), wantN: 1, wantOldest: 0},
		{name: "b", add: at(1), now: at(2), wantN: 2, wantOldest: 2 * time.Second},
		{name: "c", add: at(3), now: at(5), wantN: 3, wantOldest: 5 * time.Second},
		{name: "a", held: 5 * time.Second, now: at(5), wantN: 2, wantOldest: 4 * time.Second},
		{name: "d", add: at(6), now: at(6), wantN: 3, wantOldest: 5 * time.Second},
		{name: "b", held: 6 * time.Second, now: at(7), wantN: 2, wantOldest: 4 * time.Second},
		{name: "c", held: 4 * time.Second, now: at(7), wantN: 1, wantOldest: time.Second},
		{name: "d", held: 2 * time.Second, now: at(8), wantN: 0, wantOldest: 0},
	}
	var s InFlight
	slots := map[string]int{}
	for _, st := range steps {
		if !st.add.IsZero() {
			slots[st.name] = s.Add(st.add, nil)
		} else {
			s.Remove(slots[st.name], st.held)
		}
		if n, oldest := s.Snapshot(st.now); n != st.wantN || oldest != st.wantOldest {
			t.Errorf("after %s: Snapshot = %d, %v; want %d, %v", st.name, n, oldest, st.wantN, st.wantOldest)
		}
	}
	if slots["d"] != slots["a"] {
		t.Errorf("d took slot %d, want a's freed slot %d", slots["d"], slots["a"])
	}
	if len(s.starts) != 3 {
		t.Errorf("%d slots for at most 3 at once", len(s.starts))
	}
	if n, total := s.Held(); n != 4 || total != 17*time.Second {
		t.Errorf("Held() = %d, %v; want 4, 17s", n, total)
	}
}

// TestInFlightHeldBy: an attempt is found by its caller's context while it
// holds a connection it took before the wait began, and no longer once
// released; a nil owner (a context that is never done) finds the holders
// whose context is never done.
func TestInFlightHeldBy(t *testing.T) {
	req, other := make(chan struct{}), make(chan struct{})
	t0 := time.Unix(1000, 0)
	var s InFlight
	if s.HeldBy(req, t0) || s.HeldBy(nil, t0) {
		t.Error("an empty set holds a connection")
	}
	slot := s.Add(t0, req)
	never := s.Add(t0, nil)
	late := make(chan struct{})
	s.Add(t0.Add(time.Second), late)
	tests := []struct {
		name  string
		owner <-chan struct{}
		since time.Time
		want  bool
	}{
		{"the holder's context", req, t0, true},
		{"the holder's context, a wait begun before it held", req, t0.Add(-time.Second), false},
		{"another context", other, t0, false},
		{"a context never done", nil, t0, true},
		{"a holder that took its connection during the wait", late, t0, false},
	}
	for _, tt := range tests {
		if got := s.HeldBy(tt.owner, tt.since); got != tt.want {
			t.Errorf("%s: HeldBy = %v, want %v", tt.name, got, tt.want)
		}
	}
	s.Remove(slot, time.Second)
	s.Remove(never, time.Second)
	if s.HeldBy(req, t0) || s.HeldBy(nil, t0) {
		t.Error("released connections are still found")
	}
}
