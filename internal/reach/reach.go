package reach

import (
	"context"
	"sync"
	"time"
)

// Probe makes one connection to the server, or fails; ctx bounds it.
type Probe func(ctx context.Context) error

// Settings configure a [Signal]. Its owner applies the defaults.
type Settings struct {
	// Probe is the probe's connect; nil: no probe, only the connects the
	// calls make themselves wake them.
	Probe Probe
	// Every is the pause between two probes, scaled by Jitter (a value in
	// [0, 1)) to between half and all of it.
	Every  time.Duration
	Jitter func() float64
	// Timeout bounds one probe.
	Timeout time.Duration
}

// Signal is what the calls waiting for one server wait on. Its methods are
// safe for concurrent use; [Signal.Close] stops its probe.
type Signal struct {
	s Settings

	mu      sync.Mutex
	back    chan struct{} // closed by the next connect; nil while nobody waits
	waiting int
	probing bool
	closed  bool

	ctx  context.Context // the probe's; ends with Close
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// New returns a Signal with s.
func New(s Settings) *Signal {
	ctx, stop := context.WithCancel(context.Background())
	return &Signal{s: s, ctx: ctx, stop: stop}
}

// Connected reports a connection made to the server: every call waiting in
// [Signal.Sleep] wakes now.
func (r *Signal) Connected() {
	r.mu.Lock()
	if r.back != nil {
		close(r.back)
		r.back = nil
	}
	r.mu.Unlock()
}

// Sleep waits d, until ctx ends (it then returns ctx.Err()), or until a
// connection to the server is made ([Signal.Connected]), whichever comes
// first; a wait that ended early is not an error. While it waits, the
// probe runs.
func (r *Signal) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	r.mu.Lock()
	if r.back == nil {
		r.back = make(chan struct{})
	}
	back := r.back
	r.waiting++
	if !r.probing && !r.closed && r.s.Probe != nil {
		r.probing = true
		r.wg.Add(1)
		go r.probe()
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.waiting--
		r.mu.Unlock()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-back:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// probe connects every so often while a call waits, and wakes the waiting
// calls once a connect succeeds. It ends when no call waits any more, or at
// Close.
func (r *Signal) probe() {
	defer r.wg.Done()
	for {
		t := time.NewTimer(r.pause())
		select {
		case <-r.ctx.Done():
			t.Stop()
			r.mu.Lock()
			r.probing = false
			r.mu.Unlock()
			return
		case <-t.C:
		}
		r.mu.Lock()
		if r.waiting == 0 || r.closed {
			r.probing = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(r.ctx, r.s.Timeout)
		err := r.s.Probe(ctx)
		cancel()
		if err == nil {
			r.Connected()
		}
	}
}

// pause is the time to the next probe: between half and all of Every.
func (r *Signal) pause() time.Duration {
	j := 0.5
	if r.s.Jitter != nil {
		j = r.s.Jitter()
	}
	j = min(max(j, 0), 1)
	return time.Duration(float64(r.s.Every) * (0.5 + j/2))
}

// Close stops the probe and waits for it to end. Calls that wait go on
// waiting their time, woken by a connect as before; no new probe starts.
func (r *Signal) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.stop()
	r.wg.Wait()
}
