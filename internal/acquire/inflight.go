package acquire

import (
	"sync"
	"sync/atomic"
	"time"
)

// InFlight is the set of attempts holding a connection: it records when
// each started and its caller's context, in a slot it keeps until
// release, so the oldest can be found, and it counts the attempts
// released and their total hold time. Its zero value is empty and ready.
// It is safe for concurrent use.
type InFlight struct {
	mu     sync.Mutex
	starts []int64 // unix nanoseconds; 0 = free slot
	owners []<-chan struct{}
	free   []int

	held     atomic.Int64 // attempts released
	holdTime atomic.Int64 // their total hold time, in nanoseconds
}

// Add records an attempt that holds a connection since now, for a caller
// whose context's Done channel is owner (nil: unknown), and returns its
// slot, for [InFlight.Remove].
func (s *InFlight) Add(now time.Time, owner <-chan struct{}) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.free); n > 0 {
		slot := s.free[n-1]
		s.free = s.free[:n-1]
		s.starts[slot], s.owners[slot] = now.UnixNano(), owner
		return slot
	}
	s.starts = append(s.starts, now.UnixNano())
	s.owners = append(s.owners, owner)
	return len(s.starts) - 1
}

// HeldBy reports whether an attempt of a caller whose context's Done
// channel is owner has held a connection since before since (the start of
// a wait that timed out): a holder that took its connection later is not
// the caller the waiter runs inside of. A nil owner is a context that is
// never done (context.Background()): all such look alike, so it matches
// every holder whose context is never done.
func (s *InFlight) HeldBy(owner <-chan struct{}, since time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for slot, o := range s.owners {
		if o == owner && s.starts[slot] != 0 && s.starts[slot] <= since.UnixNano() {
			return true
		}
	}
	return false
}

// Remove frees slot, the attempt's connection released after it held it
// for held. The caller measures held on its own clock: the slot's start
// is wall time, good for an age, not for a duration to add up.
func (s *InFlight) Remove(slot int, held time.Duration) {
	s.mu.Lock()
	s.starts[slot], s.owners[slot] = 0, nil
	s.free = append(s.free, slot)
	s.mu.Unlock()
	s.held.Add(1)
	s.holdTime.Add(int64(held))
}

// Snapshot returns how many attempts hold a connection and the age of the
// oldest at now.
func (s *InFlight) Snapshot(now time.Time) (n int, oldest time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.starts {
		if st == 0 {
			continue
		}
		n++
		if age := time.Duration(now.UnixNano() - st); age > oldest {
			oldest = age
		}
	}
	return n, oldest
}

// Held returns how many attempts held a connection and released it, and
// their total hold time.
func (s *InFlight) Held() (n int64, total time.Duration) {
	return s.held.Load(), time.Duration(s.holdTime.Load())
}
