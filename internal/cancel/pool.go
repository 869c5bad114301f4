package cancel

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/cancelquery"
	"github.com/pgtx-go/pgtx/internal/classify"
)

// poolSize is the cancel pool's size.
const poolSize = 2

// poolUnhealthyFor is how long the cancel pool is skipped after it could not
// be reached or used, so a storm of cancels does not pay a failing attempt
// each.
const poolUnhealthyFor = time.Second

// acquireShare bounds the wait for a cancel-pool connection, and a cancel
// request sent past a pooler, to this fraction of the grace: neither is
// worth the whole grace when the protocol cancel can go at once.
const acquireShare = 4

// Pool is the cancel pool as a [Canceller] uses it.
type Pool interface {
	// Acquire returns one of the pool's connections, waiting for one until
	// ctx ends.
	Acquire(ctx context.Context) (PoolConn, error)
}

// PoolConn is a connection of the cancel pool.
type PoolConn interface {
	// Cancel runs [cancelquery.Cancel] (or [cancelquery.CancelActive])
	// for t and returns its row, or pgx.ErrNoRows when no backend has t's
	// pid.
	Cancel(ctx context.Context, t Target) (Answer, error)
	// Release gives the connection back to its pool.
	Release()
}

// PgxPool returns p as a [Pool].
func PgxPool(p *pgxpool.Pool) Pool { return pgxPool{p} }

type pgxPool struct{ p *pgxpool.Pool }

func (p pgxPool) Acquire(ctx context.Context) (PoolConn, error) {
	conn, err := p.p.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return pgxConn{conn}, nil
}

type pgxConn struct{ *pgxpool.Conn }

// Answer is the row of a cancel query.
type Answer struct {
	// Visible: the cancel role could see the backend's identity; Ours: it
	// is the target's; Signalled: pg_cancel_backend signalled it.
	Visible, Ours, Signalled bool
}

func (c pgxConn) Cancel(ctx context.Context, t Target) (Answer, error) {
	return cancelOn(ctx, c.Conn.Conn(), t)
}

// cancelOn runs the cancel query for t on conn.
func cancelOn(ctx context.Context, conn *pgx.Conn, t Target) (a Answer, err error) {
	sql := cancelquery.Cancel
	if t.WhileActive {
		sql = cancelquery.CancelActive
	}
	var ours *bool // NULL when not visible
	err = conn.QueryRow(ctx, sql, pgx.QueryExecModeExec, int64(t.PID), t.Start).Scan(&a.Visible, &ours, &a.Signalled)
	a.Ours = ours != nil && *ours
	return a, err
}

// nodeCanceller returns [Settings].Node for the cancel pool's connections,
// cc (a copy of theirs) and before, the caller's BeforeConnect, if any:
// the same role and TLS, on another server.
func nodeCanceller(cc *pgx.ConnConfig, before func(context.Context, *pgx.ConnConfig) error) func(context.Context, string, Target) (Answer, error) {
	return func(ctx context.Context, addr string, t Target) (Answer, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return Answer{}, err
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return Answer{}, err
		}
		ncc := cc.Copy()
		ncc.Host, ncc.Port, ncc.Fallbacks = host, uint16(p), nil
		if before != nil {
			if err := before(ctx, ncc); err != nil {
				return Answer{}, err
			}
		}
		conn, err := pgx.ConnectConfig(ctx, ncc)
		if err != nil {
			return Answer{}, err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DestroyWriteTimeout)
			defer cancel()
			_ = conn.Close(cctx)
		}()
		return cancelOn(ctx, conn, t)
	}
}

// poolResult is what a cancel over the cancel pool came to.
type poolResult int

const (
	// poolNotSent: nothing was sent (busy, unreachable, skipped), or the
	// server refused the query: nothing can arrive late; fall back.
	poolNotSent poolResult = iota
	// poolHidden: the backend exists but its identity is not visible to the
	// cancel role; nothing was signalled; fall back.
	poolHidden
	// poolSignalled: the backend was signalled.
	poolSignalled
	// poolNotFound: no backend with that identity exists; nothing was
	// signalled.
	poolNotFound
	// poolUnknown: the query was sent and its answer did not come back: the
	// signal may still happen.
	poolUnknown
	// poolElsewhere: the backend runs no statement, so the connection's
	// runs on another backend ([Target].WhileActive); nothing was
	// signalled; fall back.
	poolElsewhere
)

// viaPool runs the cancel query over the cancel pool for t.
func (c *Canceller) viaPool(ctx context.Context, t Target) poolResult {
	if c.clock.Now().UnixNano() < c.unhealthyUntil.Load() {
		return poolNotSent
	}
	actx, cancel := context.WithTimeout(ctx, c.share())
	conn, err := c.s.Pool.Acquire(actx)
	// Read before cancel, which would end actx whatever ended the acquire.
	waitedOut := actx.Err() != nil
	cancel()
	if err != nil {
		c.poolErrors.Add(1)
		if !waitedOut {
			// Not a full pool: the cancel pool cannot connect.
			c.markUnhealthy()
		}
		return poolNotSent
	}
	defer conn.Release()
	a, err := conn.Cancel(ctx, t)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		c.notFound.Add(1)
		return poolNotFound
	case err == nil && !a.Visible:
		return poolHidden
	case err == nil && a.Signalled:
		return poolSignalled
	case err == nil && a.Ours && t.WhileActive:
		return poolElsewhere
	case err == nil:
		// A visible backend with another start time: the pid was recycled,
		// and that stranger's statement was not touched.
		c.notFound.Add(1)
		return poolNotFound
	case errors.As(err, &pgErr) && pgErr.Code != pgerrcode.QueryCanceled && !classify.EndsSession(pgErr):
		// The server refused the query (not allowed to cancel, say):
		// nothing was signalled, and the next cancel would fare the same.
		c.poolErrors.Add(1)
		c.markUnhealthy()
		return poolNotSent
	case pgconn.SafeToRetry(err):
		c.poolErrors.Add(1)
		return poolNotSent
	}
	c.poolErrors.Add(1)
	if ctx.Err() == nil {
		// Not a slow answer: the cancel pool's connection broke.
		c.markUnhealthy()
	}
	return poolUnknown
}

// share bounds a step of a cancel that another can replace (the wait for
// a cancel-pool connection, a request sent past a pooler): a share of the
// grace, or of its default when the grace is off.
func (c *Canceller) share() time.Duration {
	if share := c.s.Grace / acquireShare; share > 0 {
		return share
	}
	return c.s.DefaultGrace / acquireShare
}

// markUnhealthy skips the cancel pool for poolUnhealthyFor.
func (c *Canceller) markUnhealthy() {
	c.unhealthyUntil.Store(c.clock.Now().Add(poolUnhealthyFor).UnixNano())
}
