package pgtx

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Verdict is what Diagnose makes of a pool's interval: healthy, or saturated
// for one of the two reasons the connection-timeout-storm failure card
// distinguishes. The remedies are opposite, which is why the difference
// matters: more connections cure a traffic spike and deepen a timeout storm.
type Verdict int

// The verdicts of Diagnose.
const (
	// VerdictHealthy means the pool is not saturated: callers do not wait
	// for connections and the offered load is below 90% of the pool.
	VerdictHealthy Verdict = iota
	// VerdictTimeoutStorm means the pool is saturated because connections
	// are held for long: the database (or whatever the transactions wait
	// for) is slow. Shed load or open a circuit breaker; do not grow the
	// pool, which sends more concurrent work to the slow database.
	VerdictTimeoutStorm
	// VerdictTrafficSpike means the pool is saturated although connections
	// are returned quickly: more calls arrive than the pool can serve.
	// More capacity (pool size, replicas) or rate limiting helps.
	VerdictTrafficSpike
)

// String returns "healthy", "timeout storm" or "traffic spike", or
// "Verdict(n)" for a value that is none of them.
func (v Verdict) String() string {
	switch v {
	case VerdictHealthy:
		return "healthy"
	case VerdictTimeoutStorm:
		return "timeout storm"
	case VerdictTrafficSpike:
		return "traffic spike"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// DefaultSlowHold is the mean connection hold time at or above which Diagnose
// calls the queries slow when DiagnoseConfig.SlowHold is 0. An OLTP
// transaction on a healthy PostgreSQL holds its connection for a few
// milliseconds (the failure card's "normal" is 20ms); a stalled database
// (lock waits, I/O saturation, checkpoints) holds it for seconds. 100ms is 5×
// the card's normal latency, so ordinary jitter does not reach it, and a
// tenth of a second, so a database that has really slowed down does.
// Pools whose normal transactions take longer must set SlowHold (or
// BaselineHold).
const DefaultSlowHold = 100 * time.Millisecond

// The thresholds of Diagnose's rules; see Diagnose.
const (
	saturatedUtilization = 0.9                  // offered load, in pool sizes
	saturatedAcquireWait = 5 * time.Millisecond // mean wait for a connection
	slowHoldFactor       = 3                    // × BaselineHold
	spikeArrivalFactor   = 1.5                  // × BaselineArrivalRate
)

// DiagnoseConfig tunes Diagnose. Its zero value uses the defaults and no
// baselines.
type DiagnoseConfig struct {
	// SlowHold is the mean connection hold time at or above which queries
	// count as slow. 0 (or negative) means DefaultSlowHold (100ms).
	SlowHold time.Duration

	// BaselineArrivalRate is the normal rate of Transaction calls per
	// second; 0 (or negative) means unknown. When known, an arrival rate at
	// least 1.5× the baseline is a spike, and a storm is told apart by an
	// arrival rate below that.
	BaselineArrivalRate float64

	// BaselineHold is the normal mean hold time; 0 (or negative) means
	// unknown. When known, a mean hold of at least 3× the baseline is slow
	// even below SlowHold; and when the baseline itself is at or above
	// SlowHold (a pool of long transactions), only the 3× rule applies.
	BaselineHold time.Duration

	// MaxConns is the pool's size, for the utilisation estimate. 0 means
	// after.Pool.MaxConns(); when that is nil too, the utilisation is not
	// estimated.
	MaxConns int32
}

// Diagnosis is the result of Diagnose: a verdict and the figures behind it.
type Diagnosis struct {
	// Verdict is healthy, timeout storm or traffic spike.
	Verdict Verdict
	// Interval is the time between the two snapshots, as given.
	Interval time.Duration
	// ArrivalRate is the rate of Transaction calls over the interval, per
	// second: Δ Stats.Calls / Interval. 0 when the interval is not
	// positive.
	ArrivalRate float64
	// MeanHold is the mean time an attempt held its connection, over the
	// attempts that gave one back in the interval: Δ HoldTime / Δ Held. 0
	// when none did (see OldestInFlight).
	MeanHold time.Duration
	// Waiters is the queue depth at the second snapshot: callers waiting
	// for a connection.
	Waiters int64
	// MeanAcquireWait is the mean wait for a connection of the Transaction
	// acquires that ended in the interval (from the Δ of the AcquireWait
	// histogram). Callers still waiting are not in it: see Waiters.
	MeanAcquireWait time.Duration
	// AcquireTimeouts is the number of acquires ended by AcquireTimeout in
	// the interval.
	AcquireTimeouts int64
	// QueueFull is the number of calls refused in the interval because
	// MaxWaiters callers were waiting.
	QueueFull int64
	// Utilization is the offered load as a fraction of the pool, by
	// Little's law: ArrivalRate × hold time / MaxConns, where the hold time
	// is MeanHold (or OldestInFlight when no connection came back). It can
	// exceed 1: at 3 the calls need three times the connections the pool
	// has. 0 when MaxConns or the interval is unknown.
	Utilization float64
	// MaxConns is the pool size Utilization was computed with; 0 if
	// unknown.
	MaxConns int32
	// InFlight and OldestInFlight are the attempts holding a connection at
	// the second snapshot and the age of the oldest.
	InFlight       int
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
		d.Verdict, d.ArrivalRate, roundDuration(d.MeanHold), d.Waiters, roundDuration(d.MeanAcquireWait), d.AcquireTimeouts)
	if d.MaxConns > 0 {
		fmt.Fprintf(&b, ", utilization %.2f of %d conns", d.Utilization, d.MaxConns)
	}
	fmt.Fprintf(&b, ", oldest in flight %s", roundDuration(d.OldestInFlight))
	return b.String()
}

// The Advice of each verdict.
const (
	adviceHealthy = "no action: the pool serves the arrival rate at the current query latency"
	adviceStorm   = "downstream is slow: shed load or open the breaker; do NOT grow the pool (it adds load to the slow database); look for the slow queries in pg_stat_activity"
	adviceSpike   = "queries are fast but arrivals exceed what the pool serves: more capacity (pool size, replicas) or rate limiting helps"
)

// Diagnose compares two snapshots of one pool's Stats, taken interval apart
// (before first), and says whether the pool is healthy, in a timeout storm
// or in a traffic spike, with the figures that support it. It is a pure
// function: take the snapshots with Pool.Stats and measure the interval with
// the same clock, for instance
//
//	before, t0 := pool.Stats(), time.Now()
//	// ... some seconds later ...
//	d := pgtx.Diagnose(before, pool.Stats(), time.Since(t0), pgtx.DiagnoseConfig{})
//
// The pool is saturated when any of these holds: the queue depth (Waiters)
// is above 0 now; acquires timed out, or calls were refused with a full
// queue, in the interval; the mean acquire wait was 5ms or more; the
// utilization (offered load) is 0.9 or more. The hold time is slow when it is
// at least SlowHold (default 100ms), or at least 3× BaselineHold when that
// is known (only the latter when BaselineHold is itself at least SlowHold).
// Arrivals are high when the arrival rate is at least 1.5× a known
// BaselineArrivalRate. Then:
//
//	saturated  hold time  arrivals               verdict
//	---------  ---------  ---------------------  ---------------------------------------------
//	no         any        any                    healthy
//	yes        slow       normal or unknown      timeout storm
//	yes        slow       high                   timeout storm (the Reasons note the arrivals)
//	yes        fast       high or unknown        traffic spike
//	yes        fast       normal                 traffic spike (the pool is too small for the
//	                                             normal load, or the baseline is stale)
//	yes        unknown    high                   traffic spike
//	yes        unknown    normal or unknown      timeout storm (not growing the pool is the
//	                                             safe default)
//
// A slow pool is a timeout storm even when arrivals are also above the
// baseline: the slowness may be the spike's doing, but while the database is
// slow, more connections add load to it; the Reasons say both. The hold time
// is the mean over the attempts that gave a connection back in the interval;
// when none did, the age of the oldest attempt holding one (OldestInFlight)
// stands in for it, a lower bound; when no attempt holds one either, it is
// unknown (the connections are held by plain queries or Acquire).
//
// Waiters is an instant reading, so a single caller caught acquiring an idle
// connection counts; for alerting, require the verdict on two consecutive
// intervals. Only Transaction calls count towards the arrival rate and the
// hold times; Waiters counts every acquire of the pool.
//
// Degenerate input never panics. With a zero or negative interval the rates
// (arrival, utilization) are 0 and the verdict rests on the rest. When a
// counter of after is below before's (snapshots of different pools, or a
// pool re-created), the interval's figures are unusable: the deltas are 0
// and the verdict rests on the instant readings (queue depth, the oldest
// attempt in flight); a Reason says so. A nil Stats.Pool only loses the pool
// size, which DiagnoseConfig.MaxConns can supply.
func Diagnose(before, after Stats, interval time.Duration, cfg DiagnoseConfig) Diagnosis {
	d := Diagnosis{
		Interval:       interval,
		Waiters:        max(after.Waiters, 0),
		InFlight:       after.InFlight,
		OldestInFlight: after.OldestInFlight,
		MaxConns:       cfg.MaxConns,
	}
	if d.MaxConns <= 0 {
		d.MaxConns = 0
		if after.Pool != nil {
			d.MaxConns = after.Pool.MaxConns()
		}
	}

	delta, ok := statsDelta(before, after)
	if !ok {
		d.Reasons = append(d.Reasons, "counters went backwards between the snapshots (a different or re-created pool): only the instant readings are used")
	}
	rates := interval > 0 && ok
	if !rates && ok {
		d.Reasons = append(d.Reasons, fmt.Sprintf("interval %s is not positive: rates are unknown", interval))
	}
	if rates {
		d.ArrivalRate = float64(delta.Calls) / interval.Seconds()
	}
	if delta.Held > 0 {
		d.MeanHold = delta.HoldTime / time.Duration(delta.Held)
	}
	if delta.AcquireWait.Count > 0 {
		d.MeanAcquireWait = delta.AcquireWait.Sum / time.Duration(delta.AcquireWait.Count)
	}
	d.AcquireTimeouts = delta.AcquireTimeouts
	d.QueueFull = delta.QueueFull

	// The hold time the rules use: measured, or the oldest attempt in
	// flight as a lower bound when no connection came back.
	hold, holdKnown := d.MeanHold, delta.Held > 0
	if !holdKnown && d.InFlight > 0 && d.OldestInFlight > 0 {
		hold, holdKnown = d.OldestInFlight, true
	}
	if rates && d.MaxConns > 0 && holdKnown {
		d.Utilization = d.ArrivalRate * hold.Seconds() / float64(d.MaxConns)
	}

	// Saturation.
	var sat []string
	if d.Waiters > 0 {
		sat = append(sat, fmt.Sprintf("queue depth %d: callers are waiting for a connection now", d.Waiters))
	}
	if d.AcquireTimeouts > 0 {
		sat = append(sat, fmt.Sprintf("%d acquire timeouts in the interval", d.AcquireTimeouts))
	}
	if d.QueueFull > 0 {
		sat = append(sat, fmt.Sprintf("%d calls refused with a full queue (MaxWaiters) in the interval", d.QueueFull))
	}
	if d.MeanAcquireWait >= saturatedAcquireWait {
		sat = append(sat, fmt.Sprintf("mean acquire wait %s over %d acquires (>= %s)",
			roundDuration(d.MeanAcquireWait), delta.AcquireWait.Count, saturatedAcquireWait))
	}
	if d.Utilization >= saturatedUtilization {
		sat = append(sat, fmt.Sprintf("utilization %.2f: %.1f calls/s × %s hold / %d conns (>= %.1f)",
			d.Utilization, d.ArrivalRate, roundDuration(hold), d.MaxConns, saturatedUtilization))
	}
	if len(sat) == 0 {
		d.Verdict, d.Advice = VerdictHealthy, adviceHealthy
		msg := fmt.Sprintf("not saturated: queue depth 0, no acquire timeouts or refusals, mean acquire wait %s (< %s)",
			roundDuration(d.MeanAcquireWait), saturatedAcquireWait)
		if d.MaxConns > 0 && rates {
			msg += fmt.Sprintf(", utilization %.2f of %d conns (< %.1f)", d.Utilization, d.MaxConns, saturatedUtilization)
		}
		d.Reasons = append(d.Reasons, msg)
		return d
	}
	d.Reasons = append(d.Reasons, sat...)

	// Arrivals against the baseline.
	baseArrival := cfg.BaselineArrivalRate
	arrivalKnown := rates && baseArrival > 0
	arrivalHigh := arrivalKnown && d.ArrivalRate >= spikeArrivalFactor*baseArrival
	if arrivalKnown {
		d.Reasons = append(d.Reasons, fmt.Sprintf("arrival rate %.1f/s is %.1f× the baseline %.1f/s",
			d.ArrivalRate, d.ArrivalRate/baseArrival, baseArrival))
	}

	// Slow or fast holds.
	threshold, why := slowThreshold(cfg)
	switch {
	case !holdKnown:
		d.Reasons = append(d.Reasons, "hold time unknown: no Transaction held a connection in the interval (connections held by plain queries or Acquire)")
		if arrivalHigh {
			d.Reasons = append(d.Reasons, fmt.Sprintf("arrivals are at least %.1f× the baseline: a spike", spikeArrivalFactor))
			d.Verdict, d.Advice = VerdictTrafficSpike, adviceSpike
		} else {
			d.Reasons = append(d.Reasons, "without hold times, not growing the pool is the safe default")
			d.Verdict, d.Advice = VerdictTimeoutStorm, adviceStorm
		}
	case hold >= threshold:
		d.Reasons = append(d.Reasons, fmt.Sprintf("%s %s >= %s (%s): connections are held by slow queries",
			holdName(delta.Held), roundDuration(hold), roundDuration(threshold), why))
		if arrivalHigh {
			d.Reasons = append(d.Reasons, "arrivals are high too, but while the database is slow more connections add load to it")
		}
		d.Verdict, d.Advice = VerdictTimeoutStorm, adviceStorm
	default:
		d.Reasons = append(d.Reasons, fmt.Sprintf("%s %s < %s (%s): queries are fast",
			holdName(delta.Held), roundDuration(hold), roundDuration(threshold), why))
		if arrivalKnown && !arrivalHigh {
			d.Reasons = append(d.Reasons, "arrivals are not above the baseline: the pool is too small for the normal load, or the baseline is stale")
		}
		d.Verdict, d.Advice = VerdictTrafficSpike, adviceSpike
	}
	return d
}

// slowThreshold returns the hold time at or above which queries are slow,
// and where it comes from.
func slowThreshold(cfg DiagnoseConfig) (time.Duration, string) {
	abs, why := cfg.SlowHold, "SlowHold"
	if abs <= 0 {
		abs, why = DefaultSlowHold, "default SlowHold"
	}
	if cfg.BaselineHold <= 0 {
		return abs, why
	}
	rel := slowHoldFactor * cfg.BaselineHold
	if rel < abs || cfg.BaselineHold >= abs {
		return rel, fmt.Sprintf("%d× the baseline hold %s", slowHoldFactor, roundDuration(cfg.BaselineHold))
	}
	return abs, why
}

func holdName(held int64) string {
	if held > 0 {
		return "mean hold"
	}
	return "oldest hold in flight"
}

// statsDelta returns after's counters minus before's, or ok false (and a
// zero delta) when one of them went backwards.
func statsDelta(before, after Stats) (d Stats, ok bool) {
	d = Stats{
		Calls:           after.Calls - before.Calls,
		Held:            after.Held - before.Held,
		HoldTime:        after.HoldTime - before.HoldTime,
		AcquireTimeouts: after.AcquireTimeouts - before.AcquireTimeouts,
		QueueFull:       after.QueueFull - before.QueueFull,
		AcquireWait: Histogram{
			Count: after.AcquireWait.Count - before.AcquireWait.Count,
			Sum:   after.AcquireWait.Sum - before.AcquireWait.Sum,
		},
	}
	if d.Calls < 0 || d.Held < 0 || d.HoldTime < 0 || d.AcquireTimeouts < 0 || d.QueueFull < 0 ||
		d.AcquireWait.Count < 0 || d.AcquireWait.Sum < 0 {
		return Stats{}, false
	}
	return d, true
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
