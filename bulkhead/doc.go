// Package bulkhead gives each class of operations (checkout, reports,
// audit...) a [pgtx.Pool] of its own, so that a class whose queries turn slow
// can hold only its own connections: the other classes keep theirs, and
// their throughput.
//
// Each class's queue is its own too: with a MaxWaiters, a stuck class sheds
// its own callers (with [pgtx.ErrQueueFull]) instead of queueing them in
// front of everyone else's. Each class's pool has its own retry budget and,
// with [pgtx.Config].Breaker, its own circuit breaker.
//
// [New] opens the pools from a [Config]: one base [pgtx.Config] and a
// [PoolConfig] per class name, which sizes that class's pool. Get each class's pool once, at
// start-up, with [Pools.Pool], and use it with [pgtx.Transaction] and the
// pool's query methods:
//
//	pools, err := bulkhead.New(ctx, &bulkhead.Config{Base: cfg, Pools: map[string]bulkhead.PoolConfig{
//		"checkout": {MaxConns: 8},
//		"reports":  {MaxConns: 2, MaxWaiters: 4},
//	}})
//	if err != nil {
//		return err
//	}
//	defer pools.Close()
//	checkout, err := pools.Pool("checkout")
//
// The connections add up: the database sees the sum of the classes'
// MaxConns, plus the cancel pool's connections of each class in
// [pgtx.CancelModePool], so size max_connections (or a pooler) for the
// total.
//
// The fields of [PoolConfig] follow the rule of package [pgtx] for every
// configuration field: 0 means the field's documented default, here the
// base Config's value, and a negative value switches the setting off.
package bulkhead
