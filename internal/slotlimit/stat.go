package slotlimit

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolStat returns a [Settings].Stat of the pool *p will hold. pgxpool may
// connect (for MinConns) before its constructor returns the pool: until p
// is set, the pool is taken to hold nothing.
func PoolStat(p *atomic.Pointer[pgxpool.Pool]) func() (total, connecting int) {
	return func() (int, int) {
		pool := p.Load()
		if pool == nil {
			return 0, 0
		}
		st := pool.Stat()
		return int(st.TotalConns()), int(st.ConstructingConns())
	}
}

// routine marks the context of an acquire that may wait for a pool with
// slots to spare.
type routine struct{}

// Routine returns ctx marked as a routine acquire's: a pool that gives its
// slots back while its server is full does not connect for it.
func Routine(ctx context.Context) context.Context { return context.WithValue(ctx, routine{}, true) }

// IsRoutine reports whether ctx was marked by [Routine].
func IsRoutine(ctx context.Context) bool { return ctx.Value(routine{}) != nil }

// WaitsKey is the context key whose value, true, marks the context of an
// acquire that may wait for a held connection while the pacer holds its
// connect back: one made through [Acquire]. A context of the caller's own
// may answer it, so that marking costs nothing.
type WaitsKey struct{}

// WaitForHeld returns ctx marked with [WaitsKey].
func WaitForHeld(ctx context.Context) context.Context {
	return context.WithValue(ctx, WaitsKey{}, true)
}

// waitsForHeld reports whether ctx is marked with [WaitsKey].
func waitsForHeld(ctx context.Context) bool { v, _ := ctx.Value(WaitsKey{}).(bool); return v }
