package breaker

import (
	"context"
	"fmt"
	"time"
)

// ticket is an admitted call: its outcome counts only in the state
// generation that admitted it.
type ticket struct{ generation uint64 }

// outcome is how a finished call counts.
type outcome struct{ counted, failed, slow bool }

// allow admits a call or refuses it with b.s.ErrOpen.
func (b *Breaker) allow(ctx context.Context) (ticket, error) {
	b.mu.Lock()
	defer b.unlock(ctx)
	b.advance(b.clock.Now())
	switch b.state {
	case Open:
		b.rejected++
		return ticket{}, b.s.ErrOpen
	case HalfOpen:
		if b.probes >= b.s.HalfOpenProbes {
			b.rejected++
			return ticket{}, b.s.ErrOpen
		}
		b.probes++
	}
	return ticket{generation: b.generation}, nil
}

// advance moves an open breaker whose time is up to half-open, or to
// closed when it has no probes. b.mu is held.
func (b *Breaker) advance(now time.Time) {
	if b.state == Open && !now.Before(b.openedAt.Add(b.s.OpenFor)) {
		if b.s.HalfOpenProbes == 0 {
			b.setState(Closed, "open for "+b.s.OpenFor.String()+", no probes", now)
			return
		}
		b.setState(HalfOpen, "open for "+b.s.OpenFor.String(), now)
	}
}

// record counts a finished call as o says.
func (b *Breaker) record(ctx context.Context, t ticket, o outcome) {
	b.mu.Lock()
	defer b.unlock(ctx)
	now := b.clock.Now()
	if t.generation != b.generation {
		return // admitted before the last state change: stale
	}
	switch b.state {
	case Closed:
		if !o.counted {
			return
		}
		b.window.Add(now, 1, b2i64(o.failed), b2i64(o.slow))
		if o.failed {
			b.consecutive++
		} else {
			b.consecutive = 0
		}
		b.tripIfNeeded(now)
	case HalfOpen:
		switch {
		case !o.counted:
			b.probes-- // the probe told nothing: let another one through
		case o.failed:
			b.setState(Open, "half-open probe failed", now)
		case o.slow:
			b.setState(Open, "half-open probe was slow", now)
		default:
			if b.probeOK++; b.probeOK >= b.s.HalfOpenProbes {
				b.setState(Closed, "half-open probes succeeded", now)
			}
		}
	}
}

// tripIfNeeded opens a closed breaker when a rule says so. b.mu is held.
func (b *Breaker) tripIfNeeded(now time.Time) {
	s := &b.s
	if s.ConsecutiveFailures > 0 && b.consecutive >= s.ConsecutiveFailures {
		b.setState(Open, fmt.Sprintf("%d consecutive failures", b.consecutive), now)
		return
	}
	calls, failures, slow := b.window.Sums(now)
	if calls < int64(s.MinCalls) {
		return
	}
	switch {
	case s.FailureRatio > 0 && float64(failures) >= s.FailureRatio*float64(calls):
		b.setState(Open, fmt.Sprintf("failure ratio %d/%d", failures, calls), now)
	case s.SlowCallRatio > 0 && float64(slow) >= s.SlowCallRatio*float64(calls):
		b.setState(Open, fmt.Sprintf("slow-call ratio %d/%d (>= %v)", slow, calls, s.SlowCallThreshold), now)
	}
}

// setState changes state, resets what the new state starts from, and
// queues the change for delivery once b.mu is released. b.mu is held.
func (b *Breaker) setState(to State, reason string, now time.Time) {
	from := b.state
	calls, failures, slow := b.window.Sums(now)
	b.state = to
	b.generation++
	b.probes, b.probeOK = 0, 0
	switch to {
	case Open:
		b.openedAt = now
		b.opened++
	case Closed:
		b.window.Reset(now)
		b.consecutive = 0
	}
	if b.s.OnChange != nil && b.npending < len(b.pending) {
		b.pending[b.npending] = Change{From: from, To: to, Reason: reason, Calls: calls, Failures: failures, Slow: slow}
		b.npending++
	}
}

// b2i64 returns 1 for true and 0 for false.
func b2i64(v bool) int64 {
	if v {
		return 1
	}
	return 0
}
