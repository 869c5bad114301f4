package histogram

import (
	"sync/atomic"
	"time"
)

// Bounds are the upper bounds of the buckets, ascending; a last bucket
// holds what is above the last bound.
var Bounds = [...]time.Duration{
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// Snapshot is a [Live] histogram read at one moment. Its fields are
// pgtx.Histogram's, in the same order, so that the root converts it.
type Snapshot struct {
	// Count is the number of observations, Duration their total and Max the
	// longest.
	Count    int64
	Duration time.Duration
	Max      time.Duration
	// Bounds are [Bounds].
	Bounds []time.Duration
	// Buckets has one count per bucket: len(Bounds)+1.
	Buckets []int64
}

// Live is a histogram being recorded. Its zero value is empty and ready;
// it is safe for concurrent use.
type Live struct {
	buckets [len(Bounds) + 1]atomic.Int64
	count   atomic.Int64
	sum     atomic.Int64
	max     atomic.Int64
}

// Observe records a duration of d.
func (h *Live) Observe(d time.Duration) {
	i := 0
	for i < len(Bounds) && d > Bounds[i] {
		i++
	}
	h.buckets[i].Add(1)
	h.count.Add(1)
	h.sum.Add(int64(d))
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// Snapshot returns what h has recorded. Observations made meanwhile may be
// in some of its counts and not yet in others.
func (h *Live) Snapshot() Snapshot {
	s := Snapshot{Bounds: Bounds[:], Buckets: make([]int64, len(h.buckets))}
	for i := range h.buckets {
		s.Buckets[i] = h.buckets[i].Load()
	}
	s.Count, s.Duration, s.Max = h.count.Load(), time.Duration(h.sum.Load()), time.Duration(h.max.Load())
	return s
}
