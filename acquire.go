package pgtx

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/acquire"
)

// acquire takes a connection through p's queue ([acquire.Queue]) and
// returns it with the time the wait ended. When the acquire timeout (not
// ctx) ends the wait, the error matches ErrAcquireTimeout and deliberately
// not context.DeadlineExceeded, and says whether the pool was connecting;
// when MaxWaiters callers already wait, it fails at once with ErrQueueFull.
// caller is the Done channel of the call's own context: a timeout says
// when a call with the same context holds a connection (a Transaction
// nested with the request's context instead of fn's waits for itself).
func (p *Pool) acquire(ctx context.Context, caller <-chan struct{}) (*pgxpool.Conn, time.Time, error) {
	conn, end, waited, err := p.queue.Acquire(ctx, p.pool, p.clock)
	if err == acquire.ErrFull {
		return nil, time.Time{}, ErrQueueFull
	}
	p.queue.acquireWait.Observe(waited)
	if err == acquire.ErrTimeout {
		err = &acquireTimeoutError{timeout: p.queue.Bounds().Timeout, connecting: p.connecting(),
			sameCtx: p.queue.inflight.HeldBy(caller)}
	}
	return conn, end, err
}

// connecting reports whether the pool is making connections while it has
// room: an acquire that waits then waits for a connect.
func (p *Pool) connecting() bool {
	s := p.pool.Stat()
	return s.ConstructingConns() > 0 && s.AcquiredConns() < s.MaxConns()
}
