package pgtx

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultReplicaTimeout bounds a read on a replica before it falls back.
const DefaultReplicaTimeout = 500 * time.Millisecond

// RouterConfig configures a ReplicaRouter. The zero value of each field means
// its default.
type RouterConfig struct {
	// ReplicaTimeout bounds a read on a replica; when it passes (and the
	// caller's context is still live) the read falls back to the primary.
	// Keep it short: a read that is slow on the replica should be served by
	// the primary rather than wait. 0 means DefaultReplicaTimeout (500ms);
	// negative means only the caller's context bounds it.
	ReplicaTimeout time.Duration

	// RetargetOnOverload sends the retry of a read that a replica refused
	// for overload to the next replica, instead of retrying on the same one
	// (the backpressure spec's enableOverloadRetargeting): it spreads load
	// away from an overloaded replica, at the price of reading from replicas
	// the caller may not have preferred. Off by default.
	RetargetOnOverload bool
}

// ReplicaRouter runs read-only transactions on replicas, each behind its own
// circuit breaker (Config.Breaker on the replica pools), and falls back to
// the primary when a replica fails, is slow (ReplicaTimeout), or its breaker
// is open. Writes do not go through it: use Transaction on the primary.
type ReplicaRouter struct {
	primary  *Pool
	replicas []*Pool
	cfg      RouterConfig
	next     atomic.Uint64 // round robin over the replicas

	replicaReads, fallbacks, retargets atomic.Int64
}

// RouterStats counts a router's reads.
type RouterStats struct {
	// ReplicaReads counts reads served by a replica.
	ReplicaReads int64
	// Fallbacks counts reads served by the primary after no replica could
	// serve them (failed, slow, open breaker, or no replica at all).
	Fallbacks int64
	// Retargets counts reads moved to another replica after an overload.
	Retargets int64
}

// NewReplicaRouter returns a router over primary and replicas. A nil primary
// or replica is an error matching ErrInvalidArgument. Give each replica pool
// a Config.Breaker: without one a failing replica costs every read its
// ReplicaTimeout.
func NewReplicaRouter(primary *Pool, replicas []*Pool, cfg RouterConfig) (*ReplicaRouter, error) {
	if primary == nil || primary.Pool == nil {
		return nil, &invalidArgError{msg: "NewReplicaRouter: nil primary"}
	}
	for _, r := range replicas {
		if r == nil || r.Pool == nil {
			return nil, &invalidArgError{msg: "NewReplicaRouter: nil replica"}
		}
	}
	cfg.ReplicaTimeout = durDefault(cfg.ReplicaTimeout, DefaultReplicaTimeout)
	return &ReplicaRouter{primary: primary, replicas: append([]*Pool(nil), replicas...), cfg: cfg}, nil
}

// Read runs fn in a READ COMMITTED, READ ONLY transaction on a replica,
// falling back to the primary. fn may run on a replica and then again on the
// primary.
func (r *ReplicaRouter) Read(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return r.ReadWithOptions(ctx, TxOptions{Isolation: ReadCommitted}, fn)
}

// ReadWithOptions is Read with per-call options; the transaction is always
// READ ONLY.
func (r *ReplicaRouter) ReadWithOptions(ctx context.Context, opts TxOptions, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if err := validateCall(ctx, r.primary, opts, fn); err != nil {
		return err
	}
	opts.ReadOnly = true
	n := len(r.replicas)
	first := 0
	if n > 0 {
		first = int(r.next.Add(1) % uint64(n))
	}
	replicaOpts := opts
	if r.cfg.RetargetOnOverload {
		replicaOpts.MaxAdaptiveRetries = -1 // an overload moves the read on instead
	}
	for i := range n {
		replica := r.replicas[(first+i)%n]
		if replica.breaker != nil && replica.breaker.State() == BreakerOpen {
			continue // refused anyway; try the next one
		}
		fallBack, err := r.onReplica(ctx, replica, replicaOpts, fn)
		if !fallBack {
			if err == nil {
				r.replicaReads.Add(1)
			}
			return err
		}
		if r.cfg.RetargetOnOverload && Classify(err).adaptive() && i+1 < n {
			r.retargets.Add(1)
			continue
		}
		break
	}
	r.fallbacks.Add(1)
	return TransactionWithOptions(ctx, r.primary, opts, fn)
}

// onReplica runs one read on a replica under ReplicaTimeout and says whether
// the primary should serve it instead.
func (r *ReplicaRouter) onReplica(ctx context.Context, replica *Pool, opts TxOptions, fn func(context.Context, pgx.Tx) error) (fallBack bool, err error) {
	rctx := ctx
	if r.cfg.ReplicaTimeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, r.cfg.ReplicaTimeout)
		defer cancel()
	}
	err = TransactionWithOptions(rctx, replica, opts, fn)
	switch {
	case err == nil:
		return false, nil
	case ctx.Err() != nil:
		return false, err // the caller is gone: no fallback
	case errors.Is(err, ErrCircuitOpen) || rctx.Err() != nil:
		return true, err // refused, or slower than ReplicaTimeout
	}
	switch Classify(err) {
	case ClassConnectionLost, ClassAmbiguous, ClassOverload, ClassUnavailable, ClassTimeout:
		return true, err
	}
	return false, err // the caller's or the query's own error: the primary would say the same
}

// Stats returns the router's counts.
func (r *ReplicaRouter) Stats() RouterStats {
	return RouterStats{ReplicaReads: r.replicaReads.Load(), Fallbacks: r.fallbacks.Load(), Retargets: r.retargets.Load()}
}
