package pgtx

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/slotlimit"
	"github.com/pgtx-go/pgtx/slots"
)

// slotProbeEvery is how often a pool the server refused for lack of slots
// tries one connection more, jittered to between half and one and a half
// of it: a full server sees about one refused connect per pool every two
// seconds.
const slotProbeEvery = 2 * time.Second

func slotStats(l *slotlimit.Limit) slots.Stats {
	s := l.Stats()
	return slots.Stats{
		RefusedCount: s.Refused, Limit: int32(s.Limit), ProbeCount: s.Probes, RaisedCount: s.Raised,
		WaitCount: s.Waits, WaitDuration: s.WaitTime,
	}
}

// slotSettings returns the settings of the limit of a pool of maxConns
// connections, but for its Held: they tell tracer when it is a
// [slots.Tracer].
func slotSettings(maxConns int32, tracer TransactionTracer, cancelPool bool, jitter func() float64) slotlimit.Settings {
	s := slotlimit.Settings{Max: int(maxConns), Every: slotProbeEvery, Jitter: jitter, Now: time.Now}
	if st, ok := tracer.(slots.Tracer); ok {
		s.Trace = func(ctx context.Context, d slotlimit.Data) {
			st.TraceSlots(ctx, slots.Data{Event: slots.Event(d.Event), CancelPool: cancelPool,
				Limit: int32(d.Limit), Held: int32(d.Held), Err: d.Err, Wait: d.Wait})
		}
	}
	return s
}

// newLimit returns the slot limit of the main pool, which pool will hold
// once pgxpool made it; capped is called when it drops below MaxConns.
func newLimit(pool *atomic.Pointer[pgxpool.Pool], cfg *Config, jitter func() float64, capped func()) *slotlimit.Limit {
	s := slotSettings(cfg.MaxConns, cfg.Tracer, false, jitter)
	s.Stat = slotlimit.PoolStat(pool)
	s.Capped = capped
	s.Grow = func(ctx context.Context) error { return grow(ctx, pool.Load()) }
	s.Idle = func() int {
		if p := pool.Load(); p != nil {
			return int(p.Stat().IdleConns())
		}
		return 0
	}
	return slotlimit.New(s)
}

// grow adds a connection to pool, which a Transaction waiting for a held
// connection takes ([slotlimit.Settings].Grow): it acquires one and
// releases it at once. At MaxConns, or with a connection idle (which the
// waiters take), it does nothing.
func grow(ctx context.Context, pool *pgxpool.Pool) error {
	if pool == nil {
		return nil
	}
	if st := pool.Stat(); st.TotalConns() >= st.MaxConns() || st.IdleConns() > 0 {
		return nil
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	c.Release()
	return nil
}

// slotted is a pool whose acquires wait for a held connection when the
// server has no slot for another.
type slotted struct {
	pool  *pgxpool.Pool
	limit *slotlimit.Limit
}

// Acquire takes a connection of the pool through its limit.
func (s *slotted) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	return slotlimit.Acquire[*pgxpool.Conn](ctx, s.limit, s.pool)
}

// waitsForHeld is the context of a Transaction's acquire: while the pool
// connects, the acquire takes the first connection released rather than
// wait for a connect its pacing holds back ([slotlimit.WaitsKey]).
type waitsForHeld struct{ context.Context }

func (w *waitsForHeld) Value(key any) any {
	if key == (slotlimit.WaitsKey{}) {
		return true
	}
	return w.Context.Value(key)
}
