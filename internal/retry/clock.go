package retry

import (
	"context"
	"time"
)

// Clock is the time of a call's retry loop: the real clock in production,
// a fake in unit tests, whose Sleep returns at once.
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends, and returns ctx.Err() in that case.
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the clock of production: the time of day, and a timer for
// each pause.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// Sleep waits d or until ctx ends, and returns ctx.Err() in that case.
func (RealClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sleeper is a pause that may end early: Sleep waits d or until ctx ends
// (then it returns ctx.Err()).
type Sleeper interface {
	Sleep(ctx context.Context, d time.Duration) error
}
