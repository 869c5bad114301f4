package replica

import "time"

// defaultReplicaTimeout bounds a read on a replica when
// Config.ReplicaTimeout is 0.
const defaultReplicaTimeout = 500 * time.Millisecond

// Config configures a [Router]. Its zero value uses the defaults.
type Config struct {
	// ReplicaTimeout bounds a read on a replica; when it passes (and the
	// caller's context is still live) the read falls back to the primary.
	// Keep it short: a read that is slow on the replica should be served by
	// the primary rather than wait. 0 means 500ms. A negative ReplicaTimeout
	// sets no bound of the router's own: only the caller's context bounds
	// the read on the replica.
	ReplicaTimeout time.Duration

	// RetargetOnOverload sends a read that a replica refused for overload
	// (or could not be connected to: [pgtx.ClassOverload] and
	// [pgtx.ClassUnavailable]) to the next replica at once, instead of
	// retrying it on the same one with backoff and then falling back to the
	// primary. It spreads load away from an overloaded replica, at the price
	// of reading from replicas the caller may not have preferred. Off by
	// default.
	RetargetOnOverload bool
}
