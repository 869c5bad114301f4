package pgtx

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/retry"
)

// The query methods take their connection as Transaction does when the
// server cannot be reached: a statement for which no connection could be
// made (the server refuses, answers 57P03 while it starts or shuts down, or
// no host takes writes while a standby is promoted) was never sent, so it
// waits for the server within its context's deadline (or
// RetryConfig.UnavailableTimeout without one), paced by the backoff and the
// retry budget, and woken as soon as a connection is made. A statement
// already sent is never sent again.

// conn returns a connection for a query method, waiting out a server that
// cannot be reached. A connection found closed before anything was sent on
// it is given back (the pool destroys it) and another taken.
func (p *Pool) conn(ctx context.Context) (*pgxpool.Conn, error) {
	var st retry.State
	for closed := 0; ; {
		c, err := p.pool.Acquire(ctx)
		switch {
		case err == nil && !c.Conn().IsClosed():
			return c, nil
		case err == nil:
			c.Release()
			if closed++; closed > int(p.cfg.MaxConns) {
				return nil, pgconn.ErrConnClosed
			}
		case !p.rideOut(ctx, &st, err):
			return nil, err
		}
	}
}

// rideOut reports whether a query method whose connection could not be made
// (err) tries again, after waiting for the server: only for a server that
// cannot be reached, while ctx runs and the policy's bound allows.
func (p *Pool) rideOut(ctx context.Context, st *retry.State, err error) bool {
	var connectErr *pgconn.ConnectError
	if ctx.Err() != nil || !errors.As(err, &connectErr) || Classify(err) != ClassUnavailable {
		return false
	}
	now := p.clock.Now()
	deadline, hasDeadline := ctx.Deadline()
	policy := p.settings.retry.decider()
	d := policy.Next(st, classify.Unavailable, 0, now, deadline, hasDeadline)
	if !d.Retry {
		return false
	}
	if p.budget != nil {
		d.Backoff = max(d.Backoff, p.budget.Pace(now))
	}
	return p.reach.Sleep(ctx, d.Backoff) == nil && ctx.Err() == nil
}
