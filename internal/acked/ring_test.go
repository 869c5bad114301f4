package acked

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/internal/resolve"
)

// TestRingBounds: the ring keeps the latest Size commits, in order; a
// judged entry is no longer pending, and marking one a later commit
// replaced changes nothing.
func TestRingBounds(t *testing.T) {
	r := NewRing(4)
	if got := r.Pending(func(Entry) bool { return true }); got != nil {
		t.Fatalf("an empty ring holds %v", got)
	}
	t0 := time.Unix(1000, 0)
	for i := range 6 {
		r.Add(resolve.ID{Xid: uint64(100 + i)}, "l"+strconv.Itoa(i), t0.Add(time.Duration(i)*time.Second))
	}
	all := func(Entry) bool { return true }
	got := r.Pending(all)
	if len(got) != 4 {
		t.Fatalf("%d entries, want the latest 4: %+v", len(got), got)
	}
	for i, e := range got {
		n := i + 2
		if e.Seq != uint64(n+1) || e.ID.Xid != uint64(100+n) || e.Label != "l"+strconv.Itoa(n) || !e.At.Equal(t0.Add(time.Duration(n)*time.Second)) {
			t.Errorf("entry %d = %+v, want commit %d", i, e, n)
		}
	}
	r.Done(3)
	r.Done(1) // replaced by seq 5: nothing to mark
	got = r.Pending(all)
	if len(got) != 3 || got[0].Seq != 4 || got[2].Seq != 6 {
		t.Errorf("after Done(3) and Done(1): %+v, want seqs 4, 5, 6", got)
	}
	if got := r.Pending(func(e Entry) bool { return e.ID.Xid%2 == 0 }); len(got) != 1 || got[0].ID.Xid != 104 {
		t.Errorf("Pending with a filter = %+v, want xid 104 alone", got)
	}
	if r.Len() != 6 {
		t.Errorf("Len = %d, want 6", r.Len())
	}
}

// TestRingConcurrentAdd: commits recorded at once from many goroutines
// leave exactly the latest Size in the ring, none torn (each entry's
// fields from one commit). Run it with -race.
func TestRingConcurrentAdd(t *testing.T) {
	const size, writers, each = 64, 8, 1000
	r := NewRing(size)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				x := uint64(w*each + i)
				r.Add(resolve.ID{Xid: x, System: int64(x)}, strconv.FormatUint(x, 10), time.Unix(0, int64(x)))
			}
		})
	}
	wg.Wait()
	got := r.Pending(func(Entry) bool { return true })
	if len(got) != size {
		t.Fatalf("%d entries, want %d", len(got), size)
	}
	for i, e := range got {
		if want := uint64(writers*each - size + i + 1); e.Seq != want {
			t.Errorf("entry %d has seq %d, want %d: not the latest", i, e.Seq, want)
		}
		if e.ID.System != int64(e.ID.Xid) || e.Label != strconv.FormatUint(e.ID.Xid, 10) || e.At.UnixNano() != int64(e.ID.Xid) {
			t.Errorf("entry %d is torn: %+v", i, e)
		}
	}
}
