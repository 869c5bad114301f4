package fakeclock

import (
	"context"
	"time"
)

// Clock is a clock whose time moves only when it sleeps. T is its time
// now; Sleeps records every pause, in order.
type Clock struct {
	T      time.Time
	Sleeps []time.Duration
}

// Now returns c's time.
func (c *Clock) Now() time.Time { return c.T }

// Sleep records the pause and moves the clock on; on a context whose
// deadline is on this clock ([Deadline]), a pause that would end past the
// deadline ends at it with the context's error, as a real one does.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if fd, ok := ctx.(*DeadlineCtx); ok && c.T.Add(d).After(fd.deadline) {
		c.Sleeps = append(c.Sleeps, fd.deadline.Sub(c.T))
		c.T = fd.deadline
		return ctx.Err()
	}
	c.Sleeps = append(c.Sleeps, d)
	c.T = c.T.Add(d)
	return nil
}

// DeadlineCtx is a context whose deadline passes on a Clock: from then on
// Err is context.DeadlineExceeded and Done is closed.
type DeadlineCtx struct {
	context.Context
	clk      *Clock
	deadline time.Time
	done     chan struct{}
}

// Deadline returns a context whose deadline is d after clk's time.
func Deadline(clk *Clock, d time.Duration) *DeadlineCtx {
	return &DeadlineCtx{Context: context.Background(), clk: clk, deadline: clk.T.Add(d), done: make(chan struct{})}
}

// Deadline returns the deadline, on the clock's time.
func (c *DeadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Err is context.DeadlineExceeded once the clock has reached the deadline.
func (c *DeadlineCtx) Err() error {
	if c.clk.T.Before(c.deadline) {
		return nil
	}
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	return context.DeadlineExceeded
}

// Done is closed once Err has seen the deadline pass.
func (c *DeadlineCtx) Done() <-chan struct{} {
	_ = c.Err()
	return c.done
}
