package storm

import (
	"fmt"
	"strings"
	"time"
)

// Diagnosis is the result of [Diagnose]: a verdict and the figures behind it.
type Diagnosis struct {
	// Verdict is Healthy, TimeoutStorm or TrafficSpike.
	Verdict Verdict
	// Interval is the time between the two snapshots, as given.
	Interval time.Duration
	// ArrivalRate is the rate of transactions started over the interval,
	// per second: the change of [pgtx.Stats].TransactionCount divided by
	// Interval. It is 0 when the interval is not positive.
	ArrivalRate float64
	// MeanHold is the mean time an attempt held its connection, over the
	// attempts that gave one back in the interval: the change of
	// HeldDuration divided by the change of HeldCount. It is 0 when none
	// did (see OldestInFlight).
	MeanHold time.Duration
	// Waiting is the queue depth at the second snapshot: the callers
	// waiting for a connection ([pgtx.Stats].Waiting).
	Waiting int64
	// MeanAcquireWait is the mean wait for a connection of the
	// transactions' acquires that ended in the interval (from the change of
	// the AcquireWait histogram). Callers still waiting are not in it: see
	// Waiting.
	MeanAcquireWait time.Duration
	// AcquireTimeoutCount is the number of acquires ended by the pool's
	// AcquireTimeout in the interval.
	AcquireTimeoutCount int64
	// QueueFullCount is the number of calls refused in the interval because
	// the pool's MaxWaiters callers were waiting.
	QueueFullCount int64
	// Utilization is the offered load as a fraction of the pool, by
	// Little's law: ArrivalRate times the hold time divided by MaxConns,
	// where the hold time is MeanHold (or OldestInFlight when no connection
	// came back). It can exceed 1: at 3 the calls need three times the
	// connections the pool has. It is 0 when MaxConns or the interval is
	// unknown.
	Utilization float64
	// MaxConns is the pool size Utilization was computed with; 0 if
	// unknown.
	MaxConns int32
	// InFlight is the number of attempts holding a connection at the
	// second snapshot.
	InFlight int
	// OldestInFlight is the age of the oldest attempt holding a connection
	// at the second snapshot.
	OldestInFlight time.Duration
	// Advice says what to do about the verdict.
	Advice string
	// Reasons are the figures behind the verdict, one sentence each.
	Reasons []string
}

// String returns the verdict and its main figures on one line.
func (d Diagnosis) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: arrival %.1f/s, mean hold %s, queue depth %d, mean acquire wait %s, acquire timeouts %d",
		d.Verdict, d.ArrivalRate, roundDuration(d.MeanHold), d.Waiting, roundDuration(d.MeanAcquireWait), d.AcquireTimeoutCount)
	if d.MaxConns > 0 {
		fmt.Fprintf(&b, ", utilization %.2f of %d conns", d.Utilization, d.MaxConns)
	}
	fmt.Fprintf(&b, ", oldest in flight %s", roundDuration(d.OldestInFlight))
	return b.String()
}

// roundDuration rounds d for reading: to 1µs below a millisecond, to 0.1ms
// below a second, to 1ms above.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond)
	case d < time.Second:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Millisecond)
}
