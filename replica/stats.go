package replica

// Stats counts a [Router]'s reads.
type Stats struct {
	// ReplicaReadCount counts the reads a replica served: they committed
	// there.
	ReplicaReadCount int64
	// FallbackCount counts the reads sent to the primary because no replica
	// could serve them: the replicas failed, were slower than
	// ReplicaTimeout or had an open breaker, or there were none.
	FallbackCount int64
	// RetargetCount counts the reads moved to another replica after an
	// overload (Config.RetargetOnOverload).
	RetargetCount int64
}

// Stats returns the router's counts since [New]; those of a nil Router are
// zero.
func (r *Router) Stats() Stats {
	if r == nil {
		return Stats{}
	}
	return Stats{
		ReplicaReadCount: r.replicaReads.Load(),
		FallbackCount:    r.fallbacks.Load(),
		RetargetCount:    r.retargets.Load(),
	}
}
