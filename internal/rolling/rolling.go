package rolling

import "time"

// buckets is the number of slices of a window.
const buckets = 10

// Window counts three quantities over a sliding window cut into ten
// slices; counts older than the window drop out slice by slice. Its zero
// value must be set up with [Window.Init] before use. It is not safe for
// concurrent use: its owner locks.
type Window struct {
	start   time.Time
	width   time.Duration
	buckets [buckets]bucket
}

type bucket struct {
	index int64 // which slice of time the counts belong to
	n     [3]int64
}

// Init empties w and makes it span window, from now.
func (w *Window) Init(window time.Duration, now time.Time) {
	w.start = now
	w.width = max(window/buckets, 1)
	w.buckets = [buckets]bucket{}
}

// Reset forgets every count.
func (w *Window) Reset(now time.Time) { w.Init(w.width*buckets, now) }

// index returns the slice now falls in.
func (w *Window) index(now time.Time) int64 { return int64(now.Sub(w.start) / w.width) }

// Add counts a, b and c in the slice of now.
func (w *Window) Add(now time.Time, a, b, c int64) {
	idx := w.index(now)
	bk := &w.buckets[((idx%buckets)+buckets)%buckets]
	if bk.index != idx {
		*bk = bucket{index: idx}
	}
	bk.n[0] += a
	bk.n[1] += b
	bk.n[2] += c
}

// Sums returns the three counts over the window that ends now.
func (w *Window) Sums(now time.Time) (a, b, c int64) {
	cur := w.index(now)
	for i := range w.buckets {
		if bk := &w.buckets[i]; bk.index > cur-buckets && bk.index <= cur {
			a += bk.n[0]
			b += bk.n[1]
			c += bk.n[2]
		}
	}
	return a, b, c
}
