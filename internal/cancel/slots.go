package cancel

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/slotlimit"
)

// closeTimeout bounds the close of a connection the cancel pool gives back.
const closeTimeout = time.Second

// Limited is the cancel pool [Open] opened, with its [slotlimit.Limit].
//
// While the main pool's server has no slot to spare (its limit is below
// MaxConns: [PoolSettings].Yield), the cancel pool keeps no connection
// idle: [Limited.Yield] closes those it holds, each one a cancel or a
// resolution releases is closed, and its warm connection is not made
// again. A cancel or a resolution then connects for itself, and a cancel
// whose connect is refused goes as a protocol cancel request, which takes
// no slot; a routine question ([slotlimit.Routine]: the survey of the
// commits a failover may lose) waits for a server with slots to spare.
// The slots go to the main pool's work.
type Limited struct {
	Pool  *pgxpool.Pool
	Limit *slotlimit.Limit
	yield func() bool // nil: never
}

// onDemand marks the context of a connect a cancel or a resolution needs.
type onDemand struct{}

// Acquire takes a connection of the cancel pool through its limit: when
// the server refuses a connect for lack of slots, it waits for the pool's
// own connection, if it holds one, until ctx ends.
func (l *Limited) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	if l.yielding() {
		if slotlimit.IsRoutine(ctx) {
			return nil, slotlimit.ErrNoSlot // it waits for a server with slots to spare
		}
		ctx = context.WithValue(ctx, onDemand{}, true)
	}
	return slotlimit.Acquire[*pgxpool.Conn](ctx, l.Limit, l.Pool)
}

func (l *Limited) yielding() bool { return l.yield != nil && l.yield() }

// Yield closes the cancel pool's idle connections, when the main pool's
// server has no slot to spare, and returns how many it closed.
func (l *Limited) Yield() int {
	if !l.yielding() {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	conns := l.Pool.AcquireAllIdle(ctx)
	for _, c := range conns {
		// Hijacked, not released: the limit counts only the acquires it
		// was told of.
		_ = c.Hijack().Close(ctx)
	}
	return len(conns)
}

// limitedPool is a [Limited] as a Canceller's [Pool].
type limitedPool struct{ l *Limited }

func (p limitedPool) Acquire(ctx context.Context) (PoolConn, error) {
	conn, err := p.l.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return pgxConn{conn}, nil
}

// releases is the cancel pool's tracer, which tells its limit of every
// acquire and release, and closes a connection released while the pool
// yields (pgxpool then drops it). Connections do not keep it (Open's
// BeforeConnect).
type releases struct{ l *Limited }

func (r releases) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (r releases) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r releases) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return ctx
}

func (r releases) TraceAcquireEnd(_ context.Context, _ *pgxpool.Pool, d pgxpool.TraceAcquireEndData) {
	if d.Err == nil {
		r.l.Limit.Acquired()
	}
}

func (r releases) TraceRelease(_ *pgxpool.Pool, d pgxpool.TraceReleaseData) {
	if r.l.yielding() && d.Conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_ = d.Conn.Close(ctx)
		cancel()
	}
	r.l.Limit.Released()
}

// Limited returns the cancel pool [Open] opened, with its limit; nil when
// it opened none.
func (c *Canceller) Limited() *Limited { return c.limited }
