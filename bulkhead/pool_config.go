package bulkhead

import (
	"time"

	"github.com/pgtx-go/pgtx"
)

// PoolConfig sizes the pool of one class of operations in [Pools]. Its zero
// value gives the class a pool of the base Config's size and limits.
type PoolConfig struct {
	// MaxConns is the pool's size. 0 means the base Config's MaxConns. A
	// negative MaxConns switches the pool's own limit off, which leaves the
	// base Config's MaxConns in force as with 0: a pool always has a size.
	// The base's MinConns and MinIdleConns are capped at the pool's
	// MaxConns.
	MaxConns int32
	// MaxWaiters bounds the pool's callers waiting for a connection (see
	// [pgtx.Config].MaxWaiters). 0 means the base Config's MaxWaiters; a
	// negative MaxWaiters sets no bound on the pool's queue, whatever the
	// base's.
	MaxWaiters int
	// AcquireTimeout bounds the pool's wait for a connection (see
	// [pgtx.Config].AcquireTimeout). 0 means the base Config's
	// AcquireTimeout; a negative AcquireTimeout sets no bound of the pool's
	// own: only the caller's context bounds the wait.
	AcquireTimeout time.Duration
}

// poolConfig returns the Config of the pool called name: a copy of base, with
// its own pgxpool.Config (and ConnConfig) and its own BreakerConfig, sized
// by pc. base, which must have a pgxpool.Config with a ConnConfig, is not
// modified.
func poolConfig(base *pgtx.Config, name string, pc PoolConfig) *pgtx.Config {
	cp := *base
	cp.Config = base.Config.Copy()
	if pc.MaxConns > 0 {
		cp.MaxConns = pc.MaxConns
	}
	cp.MinConns = min(cp.MinConns, cp.MaxConns)
	cp.MinIdleConns = min(cp.MinIdleConns, cp.MaxConns)
	if pc.MaxWaiters != 0 {
		cp.MaxWaiters = max(pc.MaxWaiters, 0)
	}
	if pc.AcquireTimeout != 0 {
		cp.AcquireTimeout = pc.AcquireTimeout
	}
	if base.Breaker != nil {
		b := *base.Breaker
		if b.Name == "" {
			b.Name = name
		} else {
			b.Name += "/" + name
		}
		cp.Breaker = &b
	}
	return &cp
}
