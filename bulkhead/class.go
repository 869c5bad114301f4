package bulkhead

import (
	"time"

	"github.com/pgtx-go/pgtx"
)

// Class sizes the pool of one class of operations in [Pools]. Its zero value
// gives the class a pool of the base Config's size and limits.
type Class struct {
	// MaxConns is the class's pool size. 0 means the base Config's
	// MaxConns. A negative MaxConns switches the class's own limit off,
	// which leaves the base Config's MaxConns in force as with 0: a pool
	// always has a size. The base's MinConns and MinIdleConns are capped at
	// the class's MaxConns.
	MaxConns int32
	// MaxWaiters bounds the class's callers waiting for a connection (see
	// [pgtx.Config].MaxWaiters). 0 means the base Config's MaxWaiters; a
	// negative MaxWaiters sets no bound on the class's queue, whatever the
	// base's.
	MaxWaiters int
	// AcquireTimeout bounds the class's wait for a connection (see
	// [pgtx.Config].AcquireTimeout). 0 means the base Config's
	// AcquireTimeout; a negative AcquireTimeout sets no bound of the class's
	// own: only the caller's context bounds the wait.
	AcquireTimeout time.Duration
}

// classConfig returns the Config of class name's pool: a copy of base, with
// its own pgxpool.Config (and ConnConfig) and its own BreakerConfig, sized
// for the class. base, which must have a pgxpool.Config with a ConnConfig,
// is not modified.
func classConfig(base *pgtx.Config, name string, class Class) *pgtx.Config {
	cp := *base
	cp.Config = base.Config.Copy()
	if class.MaxConns > 0 {
		cp.MaxConns = class.MaxConns
	}
	cp.MinConns = min(cp.MinConns, cp.MaxConns)
	cp.MinIdleConns = min(cp.MinIdleConns, cp.MaxConns)
	if class.MaxWaiters != 0 {
		cp.MaxWaiters = class.MaxWaiters
	}
	if class.AcquireTimeout != 0 {
		cp.AcquireTimeout = class.AcquireTimeout
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
