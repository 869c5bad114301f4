package storm

import "time"

// defaultSlowHold is the mean connection hold time at or above which
// Diagnose calls the queries slow when Config.SlowHold is 0.
const defaultSlowHold = 100 * time.Millisecond

// Config tunes [Diagnose]. Its zero value uses the default slow-hold
// threshold, no baselines, and the pool size of the second snapshot.
type Config struct {
	// SlowHold is the mean connection hold time at or above which queries
	// count as slow. 0 means 100ms: an OLTP transaction on a healthy
	// PostgreSQL holds its connection for a few milliseconds, and a stalled
	// database (lock waits, I/O saturation, checkpoints) for seconds; 100ms
	// is five times a normal 20ms, so ordinary jitter does not reach it, and
	// a tenth of a second, so a database that has really slowed down does.
	// Pools whose normal transactions take longer should set SlowHold or
	// BaselineHold. A negative SlowHold switches the absolute rule off: only
	// the BaselineHold rule judges the hold time, and without a BaselineHold
	// the hold time counts as unknown.
	SlowHold time.Duration

	// BaselineArrivalRate is the normal rate of transactions per second
	// (calls of [pgtx.Transaction] and its variants). 0 means none is known;
	// a negative, infinite or NaN value is none too. When known, an arrival rate of at
	// least 1.5 times the baseline is a spike.
	BaselineArrivalRate float64

	// BaselineHold is the normal mean connection hold time. 0 means none is
	// known; a negative value is none too. When known, a mean hold of at
	// least 3 times the baseline is slow even below SlowHold; and when the
	// baseline itself is at or above SlowHold (a pool of long
	// transactions), only the 3-times rule applies.
	BaselineHold time.Duration

	// MaxConns is the pool's size, for the utilisation estimate. 0 means
	// the MaxConns of the second snapshot's [pgtx.Stats].Pool; when that is
	// nil too, the utilisation is not estimated. A negative MaxConns
	// switches the utilisation estimate off.
	MaxConns int32
}
