package contention

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/pgtx-go/pgtx/internal/histogram"
)

// The constants of the contention manager.
const (
	// window is the number of attempts in one measurement.
	window = 50
	// windowAttempts is how many mean attempt times a measurement lasts
	// at least: long enough for the slow attempts (a deadlock found after
	// deadlock_timeout, a lock wait) to end within it, instead of only the
	// quick ones.
	windowAttempts = 10
	// openWindow is the number of attempts over which an open gate
	// compares its conflict ratio with the threshold: long enough that a
	// chance burst of conflicts on rows that are not hot (2% of 1,000
	// accounts' transfers conflict) does not engage it.
	openWindow = 4 * window
	// probeInterval is how many measurements are taken at the best limit
	// between two probes of a neighbouring one.
	probeInterval = 4
	// maxProbeInterval is where that interval stops growing while probes
	// both ways lose.
	maxProbeInterval = 16
	// smoothing weighs a new measurement of a limit against the ones
	// before it.
	smoothing = 0.5
	// calmMargin is how much less a probe up may seem to commit, within
	// the noise of one measurement, and still win when its attempts hardly
	// conflicted.
	calmMargin = 0.9
	// starving is the number of conflicts in a row after which a call's
	// retry runs alone while the gate limits.
	starving = 3
	// maxLabels bounds the labels managed apart; calls with any further
	// label share the gate of the empty label.
	maxLabels = 256
)

// Clock tells the time of the measurements and of the waits' deadlines:
// the real clock in production, a fake in tests. The waits themselves run
// on timers.
type Clock interface {
	Now() time.Time
}

// LimitFunc receives a change of a label's limit: limiting reports whether
// the gate limits from now on, limit is the new limit (0 when it does not)
// and previous the old one, and ratio the share of attempts that failed
// with a conflict in the measurement that led to the change. It is called
// with the gate locked, so it must not call the [Manager].
type LimitFunc func(ctx context.Context, label string, limiting bool, limit, previous int, ratio float64)

// Settings configure a [Manager]. They are resolved values: the pool has
// applied its defaults.
type Settings struct {
	// Clock tells the time; the waits run on timers of their own.
	Clock Clock
	// Threshold is the share of a label's attempts failing with a conflict
	// above which its gate limits them.
	Threshold float64
	// MaxLimit is the highest limit, the pool's size: at least 1.
	MaxLimit int
	// AcquireTimeout bounds a wait at a gate (0: no bound of its own); a
	// wait it ends fails with AcquireTimeoutErr.
	AcquireTimeout    time.Duration
	AcquireTimeoutErr error
	// OnLimit, when set, receives every change of a label's limit.
	OnLimit LimitFunc
}

// Stats is the state of one label's gate.
type Stats struct {
	Label    string
	Limiting bool
	Limit    int // 0 while the gate does not limit
	// Running is the number of the label's attempts running now, and
	// Waiting the number waiting at the gate.
	Running, Waiting             int
	Attempts, Conflicts, Commits int64
	// Wait is the distribution of the waits at the gate.
	Wait histogram.Snapshot
}

// errAcquireTimeout ends a wait the acquire timeout bounds when the
// settings name no error for it: a wait must end with one, or the attempt
// would run without its slot.
var errAcquireTimeout = errors.New("pgtx: acquire timeout at the contention manager's gate")

// Manager is a pool's contention manager: one [Gate] per label.
type Manager struct {
	clock          Clock
	threshold      float64
	maxLimit       int
	acquireTimeout time.Duration // 0: none
	timeoutErr     error
	onLimit        LimitFunc

	def    Gate
	mu     sync.Mutex // guards adding to labels
	labels sync.Map   // string -> *Gate
	count  int        // labels stored, under mu
}

// New returns a manager whose gates are all open.
func New(s Settings) *Manager {
	m := &Manager{clock: s.Clock, threshold: s.Threshold, maxLimit: s.MaxLimit,
		acquireTimeout: s.AcquireTimeout, timeoutErr: s.AcquireTimeoutErr,
		onLimit: s.OnLimit}
	if m.timeoutErr == nil {
		m.timeoutErr = errAcquireTimeout
	}
	m.def.init(m, "")
	return m
}

// Gate returns the gate of label. Past maxLabels labels, a new label gets
// the empty label's gate: the labels come from the callers, and each gate
// is kept for the pool's life.
func (m *Manager) Gate(label string) *Gate {
	if label == "" {
		return &m.def
	}
	if g, ok := m.labels.Load(label); ok {
		return g.(*Gate)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if g, ok := m.labels.Load(label); ok {
		return g.(*Gate)
	}
	if m.count >= maxLabels {
		return &m.def
	}
	g := &Gate{}
	g.init(m, label)
	m.labels.Store(label, g)
	m.count++
	return g
}

// Stats returns the state of every label, the empty label first.
func (m *Manager) Stats() []Stats {
	out := []Stats{m.def.stats()}
	m.labels.Range(func(_, v any) bool {
		out = append(out, v.(*Gate).stats())
		return true
	})
	sort.Slice(out[1:], func(i, j int) bool { return out[1+i].Label < out[1+j].Label })
	return out
}

// Close opens every gate and lets every waiter in: their attempts then
// fail on the closed pool.
func (m *Manager) Close() {
	m.def.open()
	m.labels.Range(func(_, v any) bool {
		v.(*Gate).open()
		return true
	})
}
