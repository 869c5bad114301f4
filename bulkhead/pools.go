package bulkhead

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/pgtx-go/pgtx"
)

// openPool opens one class's pool: pgtx.NewWithConfig, replaced by the
// tests.
var openPool = pgtx.NewWithConfig

// Pools holds one [pgtx.Pool] per class of operations. Create it with [New].
// A Pools is safe for concurrent use.
type Pools struct {
	pools     map[string]*pgtx.Pool
	names     []string // sorted
	closeOnce sync.Once
}

// Config configures [New]: the base Config of every class's pool, and
// each class's [PoolConfig] by its name.
type Config struct {
	// Base is the Config every pool is copied from; it is not modified.
	// It must have a pgxpool.Config: build it with [pgtx.ParseConfig], or
	// adopt one from pgxpool.ParseConfig as &pgtx.Config{Config: c}.
	Base *pgtx.Config
	// Pools sizes the pool of each class of operations, by the class's
	// name; it needs at least one class, and no empty name.
	Pools map[string]PoolConfig
}

// New opens one [pgtx.Pool] per class of cfg.Pools, each with
// [pgtx.NewWithConfig] from a copy of cfg.Base sized by the class's
// [PoolConfig]. Apart from MaxConns, MinConns, MinIdleConns, MaxWaiters
// and AcquireTimeout, each pool's Config is the base's: the same
// connection string, timeouts, retry policy, tracer and hooks. Each pool
// still has its own retry budget and, when the base's Breaker is set, its
// own circuit breaker, named after the pool (the base breaker's Name, a
// slash and the pool's name; the name alone when that Name is empty).
//
// A nil cfg, no class, an empty name, or a base without a pgxpool.Config is
// an error matching [pgtx.ErrInvalidArgument], and opens nothing. The
// pools are opened in the order of their names; if one cannot be opened,
// those already opened are closed, and the error of [pgtx.NewWithConfig]
// is returned wrapped, naming the class.
func New(ctx context.Context, cfg *Config) (*Pools, error) {
	if cfg == nil {
		return nil, fmt.Errorf("pgtx/bulkhead: New: nil Config: %w", pgtx.ErrInvalidArgument)
	}
	base, pools := cfg.Base, cfg.Pools
	switch {
	case base == nil:
		return nil, fmt.Errorf("pgtx/bulkhead: New: nil base Config: %w", pgtx.ErrInvalidArgument)
	case base.Config == nil || base.ConnConfig == nil:
		return nil, fmt.Errorf("pgtx/bulkhead: New: base Config has no pgxpool.Config; build it with pgtx.ParseConfig: %w", pgtx.ErrInvalidArgument)
	case len(pools) == 0:
		return nil, fmt.Errorf("pgtx/bulkhead: New needs at least one class: %w", pgtx.ErrInvalidArgument)
	}
	if _, ok := pools[""]; ok {
		return nil, fmt.Errorf("pgtx/bulkhead: New: a class name must not be empty: %w", pgtx.ErrInvalidArgument)
	}
	names := make([]string, 0, len(pools))
	for name := range pools {
		names = append(names, name)
	}
	slices.Sort(names)

	b := &Pools{pools: make(map[string]*pgtx.Pool, len(names)), names: names}
	for _, name := range names {
		p, err := openPool(ctx, poolConfig(base, name, pools[name]))
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("pgtx/bulkhead: class %q: %w", name, err)
		}
		b.pools[name] = p
	}
	return b, nil
}

// Pool returns the pool of the class called name, one of [Pools.Names]. An
// unknown name (or a nil Pools) is an error matching
// [pgtx.ErrInvalidArgument], never a nil Pool. After [Pools.Close] the pool is
// returned closed, as [pgtx.Pool.Close] leaves it.
func (b *Pools) Pool(name string) (*pgtx.Pool, error) {
	if b == nil {
		return nil, fmt.Errorf("pgtx/bulkhead: Pool of a nil Pools: %w", pgtx.ErrInvalidArgument)
	}
	p, ok := b.pools[name]
	if !ok {
		return nil, fmt.Errorf("pgtx/bulkhead: unknown class %q (classes: %q): %w", name, b.names, pgtx.ErrInvalidArgument)
	}
	return p, nil
}

// Names returns the names of the pools, the keys of the map given to [New],
// sorted.
func (b *Pools) Names() []string {
	if b == nil {
		return nil
	}
	return slices.Clone(b.names)
}

// Stats returns a snapshot of each class's [pgtx.Stats], by class name.
func (b *Pools) Stats() map[string]pgtx.Stats {
	if b == nil {
		return nil
	}
	s := make(map[string]pgtx.Stats, len(b.pools))
	for name, p := range b.pools {
		s[name] = p.Stats()
	}
	return s
}

// Close closes every class's pool, all at once, and waits for them. It is
// safe to call more than once, and on a nil Pools.
func (b *Pools) Close() {
	if b == nil {
		return
	}
	b.closeOnce.Do(func() {
		var wg sync.WaitGroup
		for _, p := range b.pools {
			wg.Go(p.Close)
		}
		wg.Wait()
	})
}
