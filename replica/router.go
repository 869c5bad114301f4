package replica

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// Router runs read-only transactions on replicas, taking them in turn, and
// falls back to the primary when a replica fails, is slower than
// Config.ReplicaTimeout, or its circuit breaker is open. Create one with
// [New]. A Router is safe for concurrent use.
type Router struct {
	primary  *pgtx.Pool
	replicas []*pgtx.Pool
	timeout  time.Duration // ReplicaTimeout with its default; negative: none
	retarget bool
	next     atomic.Uint64 // round robin over the replicas

	replicaReads, fallbacks, retargets atomic.Int64

	// run runs a transaction and isOpen says whether a pool's breaker is
	// open: pgtx.TransactionWithOptions and Pool.BreakerState, replaced by
	// the tests.
	run    func(ctx context.Context, pool *pgtx.Pool, iso pgtx.Isolation, opts pgtx.Options, fn func(context.Context, pgx.Tx) error) error
	isOpen func(pool *pgtx.Pool) bool
}

// New returns a router over primary and replicas; it keeps its own copy of
// the replicas slice. A nil primary or replica is an error matching
// [pgtx.ErrInvalidArgument]. No replicas is allowed: every read then goes
// to the primary. A nil cfg is the zero [Config]: the defaults. The router
// does not own the pools: close them after the last read.
//
// Give each replica pool a [pgtx.Config].Breaker: without one a failing
// replica costs every read its ReplicaTimeout.
func New(primary *pgtx.Pool, replicas []*pgtx.Pool, cfg *Config) (*Router, error) {
	if primary == nil {
		return nil, fmt.Errorf("pgtx/replica: New: nil primary: %w", pgtx.ErrInvalidArgument)
	}
	for i, p := range replicas {
		if p == nil {
			return nil, fmt.Errorf("pgtx/replica: New: replica %d is nil: %w", i, pgtx.ErrInvalidArgument)
		}
	}
	if cfg == nil {
		cfg = &Config{}
	}
	timeout := cfg.ReplicaTimeout
	if timeout == 0 {
		timeout = defaultReplicaTimeout
	}
	return &Router{
		primary:  primary,
		replicas: append([]*pgtx.Pool(nil), replicas...),
		timeout:  timeout,
		retarget: cfg.RetargetOnOverload,
		run:      pgtx.TransactionWithOptions,
		isOpen:   func(p *pgtx.Pool) bool { return p.BreakerState() == pgtx.BreakerOpen },
	}, nil
}

// Read runs fn in a READ COMMITTED, READ ONLY transaction on a replica,
// falling back to the primary. It is ReadWithOptions with
// [pgtx.ReadCommitted] and zero [pgtx.Options].
func (r *Router) Read(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return r.ReadWithOptions(ctx, pgtx.ReadCommitted, pgtx.Options{}, fn)
}

// ReadWithOptions runs fn in a transaction of isolation iso with opts, as
// [pgtx.TransactionWithOptions] does, on a replica, falling back to the
// primary. The transaction is always READ ONLY, whatever opts.ReadOnly says.
//
// The replicas are taken in turn, one per read. A replica whose breaker is
// open is skipped. A read the replica failed with an error of class
// [pgtx.ClassConnectionLost], [pgtx.ClassAmbiguous], [pgtx.ClassOverload],
// [pgtx.ClassUnavailable] or [pgtx.ClassTimeout], refused with
// [pgtx.ErrCircuitOpen], or did not finish within Config.ReplicaTimeout,
// runs again on the primary (with Config.RetargetOnOverload, an overload
// moves it to the next replica first). Any other error is returned as it
// is, and so is every error once ctx has ended. So fn may run on a replica
// and then again on the primary, besides pgtx's own retries; like any fn of
// pgtx, it must not have effects outside the transaction.
//
// A nil ctx or fn is an error matching [pgtx.ErrInvalidArgument]; so is
// whatever [pgtx.TransactionWithOptions] refuses, such as an invalid iso.
func (r *Router) ReadWithOptions(ctx context.Context, iso pgtx.Isolation, opts pgtx.Options, fn func(ctx context.Context, tx pgx.Tx) error) error {
	switch {
	case r == nil:
		return fmt.Errorf("pgtx/replica: Read on a nil Router: %w", pgtx.ErrInvalidArgument)
	case ctx == nil:
		return fmt.Errorf("pgtx/replica: Read with a nil context: %w", pgtx.ErrInvalidArgument)
	case fn == nil:
		return fmt.Errorf("pgtx/replica: Read with a nil function: %w", pgtx.ErrInvalidArgument)
	}
	opts.ReadOnly = true
	n := len(r.replicas)
	first := 0
	if n > 0 {
		first = int((r.next.Add(1) - 1) % uint64(n))
	}
	replicaOpts := opts
	if r.retarget {
		// An overload or an unreachable replica moves the read on instead.
		replicaOpts.MaxAdaptiveRetries, replicaOpts.UnavailableTimeout = -1, -1
	}
	for i := range n {
		replica := r.replicas[(first+i)%n]
		if r.isOpen(replica) {
			continue // refused anyway; try the next one
		}
		fallBack, err := r.onReplica(ctx, replica, iso, replicaOpts, fn)
		if !fallBack {
			if err == nil {
				r.replicaReads.Add(1)
			}
			return err
		}
		if r.retarget && i+1 < n && overloaded(err) {
			r.retargets.Add(1)
			continue
		}
		break
	}
	r.fallbacks.Add(1)
	return r.run(ctx, r.primary, iso, opts, fn)
}

// onReplica runs one read on a replica under ReplicaTimeout and says whether
// the primary should serve it instead.
func (r *Router) onReplica(ctx context.Context, replica *pgtx.Pool, iso pgtx.Isolation, opts pgtx.Options, fn func(context.Context, pgx.Tx) error) (fallBack bool, err error) {
	rctx := ctx
	if r.timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	err = r.run(rctx, replica, iso, opts, fn)
	switch {
	case err == nil:
		return false, nil
	case ctx.Err() != nil:
		return false, err // the caller is gone: no fallback
	case errors.Is(err, pgtx.ErrCircuitOpen) || rctx.Err() != nil:
		return true, err // refused, or slower than ReplicaTimeout
	}
	switch pgtx.Classify(err) {
	case pgtx.ClassConnectionLost, pgtx.ClassAmbiguous, pgtx.ClassOverload, pgtx.ClassUnavailable, pgtx.ClassTimeout:
		return true, err
	}
	return false, err // the caller's or the query's own error: the primary would say the same
}

// overloaded reports the errors a replica shedding load or not admitting
// connections returns: those RetargetOnOverload moves to the next replica.
func overloaded(err error) bool {
	c := pgtx.Classify(err)
	return c == pgtx.ClassOverload || c == pgtx.ClassUnavailable
}
