package cancel

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/slotlimit"
)

// Limited is the cancel pool [Open] opened, with its [slotlimit.Limit].
type Limited struct {
	Pool  *pgxpool.Pool
	Limit *slotlimit.Limit
}

// Acquire takes a connection of the cancel pool through its limit: when
// the server refuses a connect for lack of slots, it waits for the pool's
// own connection, if it holds one, until ctx ends.
func (l *Limited) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	return slotlimit.Acquire[*pgxpool.Conn](ctx, l.Limit, l.Pool)
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
// acquire and release. Connections do not keep it (Open's BeforeConnect).
type releases struct{ l *slotlimit.Limit }

func (r releases) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (r releases) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r releases) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return ctx
}

func (r releases) TraceAcquireEnd(_ context.Context, _ *pgxpool.Pool, d pgxpool.TraceAcquireEndData) {
	if d.Err == nil {
		r.l.Acquired()
	}
}

func (r releases) TraceRelease(*pgxpool.Pool, pgxpool.TraceReleaseData) { r.l.Released() }

// Limited returns the cancel pool [Open] opened, with its limit; nil when
// it opened none.
func (c *Canceller) Limited() *Limited { return c.limited }
