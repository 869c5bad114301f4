package acked

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgtx-go/pgtx/internal/resolve"
)

// Entry is an acknowledged commit the ring holds.
type Entry struct {
	// Seq is its place in the order of the ring's commits, from 1.
	Seq uint64
	// ID is the transaction's id, with the system and run that gave it.
	ID resolve.ID
	// Label is the call's label, and At when the call learned of the
	// commit.
	Label string
	At    time.Time
}

// slot holds one entry. Its lock is taken by the one commit that writes it
// and by a reader; writers of other slots never wait for it.
type slot struct {
	mu    sync.Mutex
	seq   uint64 // 0: empty
	done  bool   // judged: never asked about again
	id    resolve.ID
	label string
	at    int64 // unix nanoseconds
}

// Ring holds a pool's latest acknowledged commits, up to its size: each new
// one takes the place of the oldest. It is safe for concurrent use: Add
// takes a number with one atomic addition and locks only its own slot. Its
// slots are made at the first Add, so a pool that never writes pays
// nothing.
type Ring struct {
	size  int
	next  atomic.Uint64
	slots atomic.Pointer[[]slot]
}

// NewRing returns an empty ring of size entries (at least 1).
func NewRing(size int) *Ring {
	return &Ring{size: max(size, 1)}
}

// Add records a commit.
func (r *Ring) Add(id resolve.ID, label string, at time.Time) {
	slots := r.slots.Load()
	if slots == nil {
		made := make([]slot, r.size)
		if !r.slots.CompareAndSwap(nil, &made) {
			slots = r.slots.Load()
		} else {
			slots = &made
		}
	}
	seq := r.next.Add(1)
	s := &(*slots)[(seq-1)%uint64(len(*slots))]
	s.mu.Lock()
	if seq > s.seq { // a commit numbered later may have got here first
		s.seq, s.done, s.id, s.label, s.at = seq, false, id, label, at.UnixNano()
	}
	s.mu.Unlock()
}

// Len returns how many commits the ring has recorded, the ones it no
// longer holds included.
func (r *Ring) Len() uint64 { return r.next.Load() }

// Pending returns the entries not yet judged for which keep is true, in
// the order they were recorded.
func (r *Ring) Pending(keep func(Entry) bool) []Entry {
	slots := r.slots.Load()
	if slots == nil {
		return nil
	}
	var out []Entry
	for i := range *slots {
		s := &(*slots)[i]
		s.mu.Lock()
		e := Entry{Seq: s.seq, ID: s.id, Label: s.label, At: time.Unix(0, s.at)}
		live := s.seq != 0 && !s.done
		s.mu.Unlock()
		if live && keep(e) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// Done marks the entry seq judged, unless a later commit took its slot.
func (r *Ring) Done(seq uint64) {
	slots := r.slots.Load()
	if slots == nil || seq == 0 {
		return
	}
	s := &(*slots)[(seq-1)%uint64(len(*slots))]
	s.mu.Lock()
	if s.seq == seq {
		s.done = true
	}
	s.mu.Unlock()
}
