package slotlimit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgtx-go/pgtx/slots"
)

// ErrNoSlot is what a connect a [Limit] holds back returns, without
// reaching the server: the pool holds as many connections as the server
// last gave it, and its next try for one more is not due.
var ErrNoSlot = slots.ErrNoSlot

// Event is what a [Limit] tells its tracer.
type Event int

const (
	// Refused: the server refused a connect for lack of slots.
	Refused Event = iota + 1
	// Raised: a connect beyond the limit succeeded; the limit grew.
	Raised
	// Waited: an acquire waited for a held connection after a refusal,
	// or while the limit held its connect back.
	Waited
)

// Data describes an [Event].
type Data struct {
	Event Event
	// Limit is the limit after the event; Held, the connections the pool
	// held then (those connecting included).
	Limit, Held int
	// Err is the refusal (Refused).
	Err error
	// Wait is how long the acquire waited (Waited).
	Wait time.Duration
}

// firstProbe divides Every into the delay of the first try beyond the
// limit after it dropped, or after a try raised it: the delay then doubles
// with each refusal, up to Every. A pool refused at a moment's crowding
// (a fleet starting) soon takes the slots that free up; one that stays
// refused knocks once per Every.
const firstProbe = 8

// Settings configure a [Limit]. Its owner applies the defaults.
type Settings struct {
	// Max is the pool's MaxConns: the limit before any refusal.
	Max int
	// Stat returns how many connections the pool holds (total), those
	// connecting included, and how many of them are connecting.
	Stat func() (total, connecting int)
	// Every is the longest pause between two tries of a connection beyond
	// the limit ([firstProbe]), each scaled by Jitter (a value in [0, 1))
	// to between half and one and a half of it.
	Every  time.Duration
	Jitter func() float64
	// Now is the clock.
	Now func() time.Time
	// Trace, when set, is told of every event, with the acquirer's
	// context (the connect's, for Raised).
	Trace func(ctx context.Context, d Data)
	// Capped, when set, is called after each refusal that leaves the
	// limit below Max, after the refusal's event.
	Capped func()
	// Grow, when set, adds a connection to the pool and gives it back:
	// it acquires one, which makes the pool connect when none is idle,
	// and releases it. The limit calls it in the background ([Limit.grow])
	// for the acquires that wait for a held connection rather than connect
	// ([WaitsKey]). An error it returns is a refusal to learn from, or
	// nothing.
	Grow func(ctx context.Context) error
	// Idle, when set with Grow, returns how many connections are idle in
	// the pool: an acquire that may wait for a held connection does not
	// try the pool while none is idle and the pool grows for it.
	Idle func() int
}

// Limit is how many connections a pool lets itself hold: its MaxConns
// until the server refuses a connect for lack of slots while the pool
// holds some, then what it held. A connect beyond it is held back
// ([Limit.Connecting]) but for one try per Every; each that succeeds
// raises it, up to Max. It never drops below what the pool holds when
// the server refuses. Its methods are safe for concurrent use.
type Limit struct {
	s Settings

	capped   atomic.Bool  // the limit is below Max: the fast paths test only this
	limit    atomic.Int32 // written under mu
	acquired atomic.Int32 // connections acquired from the pool, on every path

	// probeAt is when the next try beyond the limit is due, and probing
	// when one started (0: none), in unix nanoseconds: read without mu,
	// written under it.
	probeAt, probing atomic.Int64

	mu    sync.Mutex
	delay time.Duration // before the next try beyond the limit
	// queue holds the acquires waiting for a held connection, first come
	// first; waiting is its length, read without mu.
	queue   []*waiter
	waiting atomic.Int32

	pace pacer

	// growing counts the connects of Grow in flight; closed: Close ran.
	// They are guarded by mu.
	growing int
	grewAt  time.Time // when the last of them started
	closed  bool
	grows   sync.WaitGroup
	stop    context.Context // ends at Close
	cancel  context.CancelFunc

	refused   atomic.Int64
	probes    atomic.Int64
	raised    atomic.Int64
	waits     atomic.Int64
	waitNanos atomic.Int64
}

// New returns a Limit with s, at s.Max.
func New(s Settings) *Limit {
	l := &Limit{s: s}
	l.limit.Store(int32(s.Max))
	l.stop, l.cancel = context.WithCancel(context.Background())
	return l
}

// Close ends the connects Settings.Grow makes and waits for them: call it
// before the pool closes.
func (l *Limit) Close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	l.grows.Wait()
}

func (l *Limit) held() int {
	total, _ := l.s.Stat()
	return total
}

// established returns how many connections the pool holds, not counting
// those connecting: a connect in flight that then succeeds raises the
// limit ([Limit.Connected]).
func (l *Limit) established() int {
	total, connecting := l.s.Stat()
	return total - connecting
}

// Connecting is the pool's BeforeConnect step. While the limit is below
// Max, it returns [ErrNoSlot] at once for a connect that would take the
// pool beyond it, but for one try per Every; a connect that goes is paced
// ([pacer]), and one made for a waiter takes it out of the turns of the
// releases' wakes until the connect ends.
func (l *Limit) Connecting(ctx context.Context) error {
	probe, err := l.admit()
	if err != nil {
		return err
	}
	if err := l.pace.wait(ctx, l.s.Stat, l.s.Grow != nil); err != nil {
		if probe != 0 {
			l.unprobe(probe) // not made: the try stays due
		}
		return err
	}
	l.connecting(ctx)
	return nil
}

// admit returns [ErrNoSlot] for a connect beyond the limit, but for one
// try per Every; probe is when the try it let through started (0: none).
func (l *Limit) admit() (probe int64, err error) {
	if !l.capped.Load() {
		return 0, nil
	}
	held := l.held() // this connect included
	l.mu.Lock()
	defer l.mu.Unlock()
	switch now := l.s.Now(); {
	case !l.capped.Load() || held <= int(l.limit.Load()):
		return 0, nil // a connection that replaces one the pool lost
	case !l.due(now):
		return 0, ErrNoSlot
	default:
		l.probing.Store(now.UnixNano())
		l.probes.Add(1)
		return now.UnixNano(), nil
	}
}

// unprobe takes back the try beyond the limit that started at probe, which
// the pacer held back.
func (l *Limit) unprobe(probe int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.probing.Load() == probe {
		l.probing.Store(0)
		l.probes.Add(-1)
	}
}

// Connected is the pool's AfterConnect step: the next paced connect may
// go, and a connect beyond the limit that succeeded raises it.
func (l *Limit) Connected(ctx context.Context) {
	l.pace.done()
	if !l.capped.Load() {
		return
	}
	held := l.held()
	l.mu.Lock()
	if !l.capped.Load() || held <= int(l.limit.Load()) {
		l.mu.Unlock()
		return
	}
	limit := min(held, l.s.Max)
	l.limit.Store(int32(limit))
	l.probing.Store(0)
	// Slots are free: the next try comes soon.
	l.delay = l.s.Every / firstProbe
	l.probeAt.Store(l.next())
	if limit >= l.s.Max {
		l.capped.Store(false)
	}
	l.mu.Unlock()
	l.raised.Add(1)
	l.trace(ctx, Data{Event: Raised, Limit: limit, Held: held})
}

// refuse records a refusal of the server for lack of slots, met by an
// acquire while the pool held held connections (established): with any,
// the limit drops to them, and the next try beyond it is due after a
// delay that doubles with each refusal, from Every/firstProbe up to Every.
func (l *Limit) refuse(ctx context.Context, held int, err error) {
	l.refused.Add(1)
	l.mu.Lock()
	was := l.capped.Load()
	if held > 0 {
		limit := min(held, l.s.Max)
		l.limit.Store(int32(limit))
		l.capped.Store(limit < l.s.Max)
		l.probing.Store(0)
		if !was || l.delay == 0 {
			l.delay = l.s.Every / firstProbe
		}
		l.probeAt.Store(l.next())
		l.delay = min(2*l.delay, l.s.Every)
	}
	limit := int(l.limit.Load())
	capped := held > 0 && l.capped.Load()
	l.mu.Unlock()
	l.trace(ctx, Data{Event: Refused, Limit: limit, Held: held, Err: err})
	if capped && l.s.Capped != nil {
		l.s.Capped()
	}
}

// Capped reports whether the limit is below Max: the server has no slot
// to spare.
func (l *Limit) Capped() bool { return l.capped.Load() }

// next returns when the next try beyond the limit is due, in unix
// nanoseconds: l.delay from now, jittered; l.mu is held.
func (l *Limit) next() int64 {
	j := 0.5
	if l.s.Jitter != nil {
		j = l.s.Jitter()
	}
	return l.s.Now().Add(time.Duration((0.5 + j) * float64(l.delay))).UnixNano()
}

// ProbeSoon makes the next try beyond the limit due at once: the pool
// gave a slot back (its cancel pool's), which its own work may take.
func (l *Limit) ProbeSoon() {
	if !l.capped.Load() {
		return
	}
	l.mu.Lock()
	l.probeAt.Store(l.s.Now().UnixNano())
	l.mu.Unlock()
}

// Acquired is the pool's acquire step, on every path: it counts a
// connection taken from the pool.
func (l *Limit) Acquired() { l.acquired.Add(1) }

// Released is the pool's release step, on every path, which runs just
// before the connection is back in the pool: it counts it back, and the
// first acquire waiting for a held connection tries again.
func (l *Limit) Released() {
	l.acquired.Add(-1)
	l.Back()
}

// Back says that a connection is back in the pool: the first acquire
// waiting for a held connection tries again.
func (l *Limit) Back() {
	if l.waiting.Load() == 0 {
		return
	}
	l.mu.Lock()
	l.wakeHead()
	l.mu.Unlock()
}

// full reports whether the pool holds its limit, acquired, and no try
// beyond it is due: an acquire then waits in the queue without trying the
// pool.
func (l *Limit) full() bool {
	// acquired may run below zero when the pool's own AcquireAllIdle lent
	// connections the tracer was not told of: then it is not full.
	return l.capped.Load() && l.acquired.Load() >= l.limit.Load() && !l.due(l.s.Now())
}

// due reports whether a try beyond the limit is due at now.
func (l *Limit) due(now time.Time) bool {
	n := now.UnixNano()
	probing := l.probing.Load()
	return n >= l.probeAt.Load() && (probing == 0 || n-probing >= int64(l.s.Every))
}

func (l *Limit) trace(ctx context.Context, d Data) {
	if l.s.Trace != nil {
		l.s.Trace(ctx, d)
	}
}

// Stats are a snapshot of a [Limit]'s counters.
type Stats struct {
	// Refused counts refusals for lack of slots its acquires met.
	Refused int64
	// Limit is the limit now.
	Limit int
	// Probes counts connects beyond the limit let through; Raised, those
	// that raised it.
	Probes, Raised int64
	// Waits counts acquires that waited for a held connection; WaitTime is
	// their total.
	Waits    int64
	WaitTime time.Duration
}

// Stats returns l's counters.
func (l *Limit) Stats() Stats {
	return Stats{
		Refused: l.refused.Load(), Limit: int(l.limit.Load()), Probes: l.probes.Load(), Raised: l.raised.Load(),
		Waits: l.waits.Load(), WaitTime: time.Duration(l.waitNanos.Load()),
	}
}
