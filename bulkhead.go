package pgtx

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// BulkheadClass sizes the pool of one class of operations in Bulkheads. The
// zero value of each field means the base Config's value.
type BulkheadClass struct {
	// MaxConns is the class's pool size. 0 means the base Config's
	// MaxConns; negative is refused.
	MaxConns int32
	// MaxWaiters bounds the class's callers waiting for a connection (see
	// Config.MaxWaiters). 0 means the base Config's; negative is refused.
	MaxWaiters int
	// AcquireTimeout bounds the class's wait for a connection (see
	// Config.AcquireTimeout). 0 means the base Config's; negative means only
	// the caller's context bounds the wait, as in Config.
	AcquireTimeout time.Duration
}

// Bulkheads gives each class of operations (checkout, reports, audit...) its
// own Pool, so a class whose queries turn slow can hold only its own
// connections: the others keep theirs and their throughput. This is the
// failure card's "separate connection pools per downstream operation type".
// Each class's queue is its own too: with MaxWaiters, a stuck class sheds its
// own callers instead of queueing them in front of everyone else's.
//
// The connections add up: the database sees the sum of the classes' MaxConns
// (plus one to two per class for the cancel pool in CancelModePool), so size
// max_connections, or a pooler, for the total.
//
// Get each class's Pool once, at start-up, and use it with Transaction and
// the Pool's query methods:
//
//	bh, err := pgtx.NewBulkheads(ctx, cfg, map[string]pgtx.BulkheadClass{
//		"checkout": {MaxConns: 8},
//		"reports":  {MaxConns: 2, MaxWaiters: 4},
//	})
//	...
//	checkout, err := bh.Pool("checkout")
//
// A Bulkheads is safe for concurrent use.
type Bulkheads struct {
	pools     map[string]*Pool
	names     []string // sorted
	closeOnce sync.Once
}

// NewBulkheads opens one Pool per class, each from a copy of base (which
// must come from ParseConfig and is not modified) with the class's
// MaxConns, MaxWaiters and AcquireTimeout. base's MinConns and MinIdleConns
// are capped at each class's MaxConns. Everything else (connection string,
// timeouts, retry policy, tracer, hooks) is base's, the same for every
// class; each Pool still has its own state, so with Config.Breaker each
// class gets its own circuit breaker and its own retry budget.
//
// No classes, an empty class name, a negative MaxConns or MaxWaiters, or a
// base NewWithConfig would refuse is an error matching ErrInvalidArgument,
// and opens nothing. If a pool cannot be opened, those already opened are
// closed.
func NewBulkheads(ctx context.Context, base *Config, classes map[string]BulkheadClass) (*Bulkheads, error) {
	if err := base.validate(); err != nil {
		return nil, err
	}
	if len(classes) == 0 {
		return nil, &invalidArgError{msg: "NewBulkheads needs at least one class"}
	}
	names := make([]string, 0, len(classes))
	for name := range classes {
		names = append(names, name)
	}
	slices.Sort(names)

	cfgs := make(map[string]*Config, len(classes))
	for _, name := range names {
		cfg, err := base.bulkheadConfig(name, classes[name])
		if err != nil {
			return nil, err
		}
		cfgs[name] = cfg
	}

	b := &Bulkheads{pools: make(map[string]*Pool, len(names)), names: names}
	for _, name := range names {
		p, err := NewWithConfig(ctx, cfgs[name])
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("pgtx: bulkhead %q: %w", name, err)
		}
		b.pools[name] = p
	}
	return b, nil
}

// bulkheadConfig returns a copy of c, which validate has accepted, sized for
// one class. The copy has its own pgxpool.Config (and ConnConfig), and keeps
// the invariant NewWithConfig checks: it looks as if ParseConfig made it.
func (c *Config) bulkheadConfig(name string, class BulkheadClass) (*Config, error) {
	switch {
	case name == "":
		return nil, &invalidArgError{msg: "bulkhead class name must not be empty"}
	case class.MaxConns < 0:
		return nil, &invalidArgError{msg: fmt.Sprintf("bulkhead %q: MaxConns must not be negative, got %d", name, class.MaxConns)}
	case class.MaxWaiters < 0:
		return nil, &invalidArgError{msg: fmt.Sprintf("bulkhead %q: MaxWaiters must not be negative, got %d", name, class.MaxWaiters)}
	}
	cp := *c
	pc := c.Config.Copy()
	cp.Config, cp.parsed = pc, pc
	if class.MaxConns > 0 {
		pc.MaxConns = class.MaxConns
	}
	pc.MinConns = min(pc.MinConns, pc.MaxConns)
	pc.MinIdleConns = min(pc.MinIdleConns, pc.MaxConns)
	if class.MaxWaiters > 0 {
		cp.MaxWaiters = class.MaxWaiters
	}
	if class.AcquireTimeout != 0 {
		cp.AcquireTimeout = class.AcquireTimeout
	}
	if err := cp.validate(); err != nil {
		return nil, fmt.Errorf("pgtx: bulkhead %q: %w", name, err)
	}
	return &cp, nil
}

// Pool returns the Pool of a class. An unknown class (or a nil Bulkheads) is
// an error matching ErrInvalidArgument, never a nil Pool. After Close the
// class's Pool is returned closed, as Pool.Close leaves it.
func (b *Bulkheads) Pool(class string) (*Pool, error) {
	if b == nil {
		return nil, &invalidArgError{msg: "nil Bulkheads"}
	}
	p, ok := b.pools[class]
	if !ok {
		return nil, &invalidArgError{msg: fmt.Sprintf("unknown bulkhead class %q (classes: %q)", class, b.names)}
	}
	return p, nil
}

// Classes returns the class names, sorted.
func (b *Bulkheads) Classes() []string {
	if b == nil {
		return nil
	}
	return slices.Clone(b.names)
}

// Stats returns a snapshot of each class's Pool statistics, by class name.
func (b *Bulkheads) Stats() map[string]Stats {
	if b == nil {
		return nil
	}
	s := make(map[string]Stats, len(b.pools))
	for name, p := range b.pools {
		s[name] = p.Stats()
	}
	return s
}

// Close closes every class's Pool, at once, and waits for them. It is safe to
// call more than once.
func (b *Bulkheads) Close() {
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
