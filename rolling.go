package pgtx

import "time"

// rollingBuckets is the number of slices of a rolling window.
const rollingBuckets = 10

// rolling counts three quantities over a sliding window cut into
// rollingBuckets slices; counts older than the window drop out slice by
// slice. It is not safe for concurrent use: its owner locks.
type rolling struct {
	start   time.Time
	width   time.Duration
	buckets [rollingBuckets]rollingBucket
}

type rollingBucket struct {
	index int64 // which slice of time the counts belong to
	n     [3]int64
}

func (r *rolling) init(window time.Duration, now time.Time) {
	r.start = now
	r.width = max(window/rollingBuckets, 1)
	r.buckets = [rollingBuckets]rollingBucket{}
}

// reset forgets every count.
func (r *rolling) reset(now time.Time) { r.init(r.width*rollingBuckets, now) }

// index returns the slice now falls in.
func (r *rolling) index(now time.Time) int64 { return int64(now.Sub(r.start) / r.width) }

// add counts a, b and c in the slice of now.
func (r *rolling) add(now time.Time, a, b, c int64) {
	idx := r.index(now)
	bk := &r.buckets[((idx%rollingBuckets)+rollingBuckets)%rollingBuckets]
	if bk.index != idx {
		*bk = rollingBucket{index: idx}
	}
	bk.n[0] += a
	bk.n[1] += b
	bk.n[2] += c
}

// sums returns the three counts over the window that ends now.
func (r *rolling) sums(now time.Time) (a, b, c int64) {
	cur := r.index(now)
	for i := range r.buckets {
		if bk := &r.buckets[i]; bk.index > cur-rollingBuckets && bk.index <= cur {
			a += bk.n[0]
			b += bk.n[1]
			c += bk.n[2]
		}
	}
	return a, b, c
}
