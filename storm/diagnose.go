package storm

import (
	"fmt"
	"math"
	"time"

	"github.com/pgtx-go/pgtx"
)

// The thresholds of Diagnose's rules; see Diagnose.
const (
	saturatedUtilization = 0.9                  // offered load, in pool sizes
	saturatedAcquireWait = 5 * time.Millisecond // mean wait for a connection
	slowHoldFactor       = 3                    // times Config.BaselineHold
	spikeArrivalFactor   = 1.5                  // times Config.BaselineArrivalRate
)

// The Advice of each verdict.
const (
	adviceHealthy = "no action: the pool serves the arrival rate at the current query latency"
	adviceStorm   = "downstream is slow: shed load or open the breaker; do NOT grow the pool (it adds load to the slow database); look for the slow queries in pg_stat_activity"
	adviceSpike   = "queries are fast but arrivals exceed what the pool serves: more capacity (pool size, replicas) or rate limiting helps"
)

// Diagnose compares two snapshots of one pool's [pgtx.Stats], taken interval
// apart (before first), and says whether the pool is healthy, in a timeout
// storm or in a traffic spike, with the figures that support it. It is a
// pure function: take the snapshots with [pgtx.Pool.Stats] and measure the
// interval with the same clock.
//
// The pool is saturated when any of these holds: the queue depth
// (Stats.Waiting) is above 0 now; acquires timed out, or calls were refused
// with a full queue, in the interval; the mean acquire wait was 5ms or more;
// the utilization (offered load) is 0.9 or more. The hold time is slow when
// it is at least Config.SlowHold (default 100ms), or at least 3 times
// Config.BaselineHold when that is known (only the latter when BaselineHold
// is itself at least SlowHold, or SlowHold is negative). Arrivals are high
// when the arrival rate is at least 1.5 times a known
// Config.BaselineArrivalRate. Then:
//
//	saturated  hold time  arrivals               verdict
//	---------  ---------  ---------------------  ---------------------------------------------
//	no         any        any                    Healthy
//	yes        slow       normal or unknown      TimeoutStorm
//	yes        slow       high                   TimeoutStorm (the Reasons note the arrivals)
//	yes        fast       high or unknown        TrafficSpike
//	yes        fast       normal                 TrafficSpike (the pool is too small for the
//	                                             normal load, or the baseline is stale)
//	yes        unknown    high                   TrafficSpike
//	yes        unknown    normal or unknown      TimeoutStorm (not growing the pool is the
//	                                             safe default)
//
// A slow pool is a timeout storm even when arrivals are also above the
// baseline: the slowness may be the spike's doing, but while the database is
// slow, more connections add load to it; the Reasons say both. The hold time
// is the mean over the attempts that gave a connection back in the interval;
// when none did, the age of the oldest attempt holding one (OldestInFlight)
// stands in for it, a lower bound; when no attempt holds one either, it is
// unknown (the connections are held by plain queries). It is unknown too
// when no rule can judge it: SlowHold negative and no BaselineHold.
//
// Stats.Waiting is an instant reading, so a single caller caught acquiring
// an idle connection counts; for alerting, require the verdict on two
// consecutive intervals. Only transactions ([pgtx.Transaction] and its
// variants) count towards the arrival rate and the hold times; Waiting counts
// every acquire of the pool.
//
// Degenerate input never panics. With a zero or negative interval the rates
// (arrival, utilization) are 0 and the verdict rests on the rest. When a
// counter of after is below before's (snapshots of different pools, or a
// pool re-created), the interval's figures are unusable: the changes count
// as 0 and the verdict rests on the instant readings (queue depth, the
// oldest attempt in flight); a Reason says so. A nil Stats.Pool only loses
// the pool size, which Config.MaxConns can supply. A nil cfg is the zero
// Config: the defaults.
func Diagnose(before, after pgtx.Stats, interval time.Duration, cfg *Config) Diagnosis {
	if cfg == nil {
		cfg = &Config{}
	}
	r := read(before, after, interval, cfg)
	sat := saturation(r.d, r.delta.acquires, r.hold)
	if len(sat) == 0 {
		return r.healthy()
	}
	r.d.Reasons = append(r.d.Reasons, sat...)
	return r.judge(cfg)
}

// reading is what Diagnose measured between two snapshots, before any
// verdict.
type reading struct {
	d         Diagnosis
	delta     delta
	rates     bool          // the interval gives rates
	hold      time.Duration // the hold time the rules use
	holdKnown bool
}

// read measures the interval between before and after: the rates, the
// mean hold and acquire wait, and the utilization.
func read(before, after pgtx.Stats, interval time.Duration, cfg *Config) reading {
	d := Diagnosis{
		Interval:       interval,
		Waiting:        max(after.Waiting, 0),
		InFlight:       after.InFlight,
		OldestInFlight: after.OldestInFlight,
	}
	switch {
	case cfg.MaxConns > 0:
		d.MaxConns = cfg.MaxConns
	case cfg.MaxConns == 0 && after.Pool != nil:
		d.MaxConns = after.Pool.MaxConns()
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
		d.ArrivalRate = float64(delta.transactions) / interval.Seconds()
	}
	if delta.held > 0 {
		d.MeanHold = delta.heldDuration / time.Duration(delta.held)
	}
	if delta.acquires > 0 {
		d.MeanAcquireWait = delta.acquireWait / time.Duration(delta.acquires)
	}
	d.AcquireTimeoutCount = delta.acquireTimeouts
	d.QueueFullCount = delta.queueFull

	// The hold time the rules use: measured, or the oldest attempt in
	// flight as a lower bound when no connection came back.
	hold, holdKnown := d.MeanHold, delta.held > 0
	if !holdKnown && d.InFlight > 0 && d.OldestInFlight > 0 {
		hold, holdKnown = d.OldestInFlight, true
	}
	if rates && d.MaxConns > 0 && holdKnown {
		d.Utilization = d.ArrivalRate * hold.Seconds() / float64(d.MaxConns)
	}
	return reading{d: d, delta: delta, rates: rates, hold: hold, holdKnown: holdKnown}
}

// healthy is the diagnosis of a pool that is not saturated.
func (r reading) healthy() Diagnosis {
	d := r.d
	d.Verdict, d.Advice = Healthy, adviceHealthy
	msg := fmt.Sprintf("not saturated: queue depth 0, no acquire timeouts or refusals, mean acquire wait %s (< %s)",
		roundDuration(d.MeanAcquireWait), saturatedAcquireWait)
	if d.MaxConns > 0 && r.rates {
		msg += fmt.Sprintf(", utilization %.2f of %d conns (< %.1f)", d.Utilization, d.MaxConns, saturatedUtilization)
	}
	d.Reasons = append(d.Reasons, msg)
	return d
}

// judge tells a saturated pool's timeout storm from a traffic spike, by
// its hold time and its arrivals against the baseline.
func (r reading) judge(cfg *Config) Diagnosis {
	d := r.d
	// Arrivals against the baseline. A NaN baseline fails the comparison.
	baseArrival := cfg.BaselineArrivalRate
	arrivalKnown := r.rates && baseArrival > 0 && !math.IsInf(baseArrival, 1)
	arrivalHigh := arrivalKnown && d.ArrivalRate >= spikeArrivalFactor*baseArrival
	if arrivalKnown {
		d.Reasons = append(d.Reasons, fmt.Sprintf("arrival rate %.1f/s is %.1f× the baseline %.1f/s",
			d.ArrivalRate, d.ArrivalRate/baseArrival, baseArrival))
	}

	// Slow or fast holds.
	threshold, why, judged := slowThreshold(*cfg)
	unknownHold := func() {
		if arrivalHigh {
			d.Reasons = append(d.Reasons, fmt.Sprintf("arrivals are at least %.1f× the baseline: a spike", spikeArrivalFactor))
			d.Verdict, d.Advice = TrafficSpike, adviceSpike
			return
		}
		d.Reasons = append(d.Reasons, "without hold times, not growing the pool is the safe default")
		d.Verdict, d.Advice = TimeoutStorm, adviceStorm
	}
	held, hold := r.delta.held, r.hold
	switch {
	case !r.holdKnown:
		d.Reasons = append(d.Reasons, "hold time unknown: no transaction held a connection in the interval (connections held by plain queries)")
		unknownHold()
	case !judged:
		d.Reasons = append(d.Reasons, fmt.Sprintf("hold time unknown: %s %s, but SlowHold is negative and there is no BaselineHold to judge it by",
			holdName(held), roundDuration(hold)))
		unknownHold()
	case hold >= threshold:
		d.Reasons = append(d.Reasons, fmt.Sprintf("%s %s >= %s (%s): connections are held by slow queries",
			holdName(held), roundDuration(hold), roundDuration(threshold), why))
		if arrivalHigh {
			d.Reasons = append(d.Reasons, "arrivals are high too, but while the database is slow more connections add load to it")
		}
		d.Verdict, d.Advice = TimeoutStorm, adviceStorm
	default:
		d.Reasons = append(d.Reasons, fmt.Sprintf("%s %s < %s (%s): queries are fast",
			holdName(held), roundDuration(hold), roundDuration(threshold), why))
		if arrivalKnown && !arrivalHigh {
			d.Reasons = append(d.Reasons, "arrivals are not above the baseline: the pool is too small for the normal load, or the baseline is stale")
		}
		d.Verdict, d.Advice = TrafficSpike, adviceSpike
	}
	return d
}

// saturation returns the reasons d's pool is saturated, none when it is not.
// acquires is the number of acquires behind d.MeanAcquireWait, hold the
// hold time behind d.Utilization.
func saturation(d Diagnosis, acquires int64, hold time.Duration) []string {
	var sat []string
	if d.Waiting > 0 {
		sat = append(sat, fmt.Sprintf("queue depth %d: callers are waiting for a connection now", d.Waiting))
	}
	if d.AcquireTimeoutCount > 0 {
		sat = append(sat, fmt.Sprintf("%d acquire timeouts in the interval", d.AcquireTimeoutCount))
	}
	if d.QueueFullCount > 0 {
		sat = append(sat, fmt.Sprintf("%d calls refused with a full queue (MaxWaiters) in the interval", d.QueueFullCount))
	}
	if d.MeanAcquireWait >= saturatedAcquireWait {
		sat = append(sat, fmt.Sprintf("mean acquire wait %s over %d acquires (>= %s)",
			roundDuration(d.MeanAcquireWait), acquires, saturatedAcquireWait))
	}
	if d.Utilization >= saturatedUtilization {
		sat = append(sat, fmt.Sprintf("utilization %.2f: %.1f calls/s × %s hold / %d conns (>= %.1f)",
			d.Utilization, d.ArrivalRate, roundDuration(hold), d.MaxConns, saturatedUtilization))
	}
	return sat
}

// slowThreshold returns the hold time at or above which queries are slow and
// where it comes from, or judged false when no rule applies (SlowHold
// negative and no BaselineHold).
func slowThreshold(cfg Config) (threshold time.Duration, why string, judged bool) {
	baseline := cfg.BaselineHold > 0
	rel := slowHoldFactor * cfg.BaselineHold
	relWhy := fmt.Sprintf("%d× the baseline hold %s", slowHoldFactor, roundDuration(cfg.BaselineHold))
	if cfg.SlowHold < 0 {
		if !baseline {
			return 0, "", false
		}
		return rel, relWhy, true
	}
	abs, absWhy := cfg.SlowHold, "SlowHold"
	if abs == 0 {
		abs, absWhy = defaultSlowHold, "default SlowHold"
	}
	if baseline && (rel < abs || cfg.BaselineHold >= abs) {
		return rel, relWhy, true
	}
	return abs, absWhy, true
}

// holdName names the hold time the rules use: the mean over the attempts
// that gave a connection back (held of them), or the oldest in flight.
func holdName(held int64) string {
	if held > 0 {
		return "mean hold"
	}
	return "oldest hold in flight"
}

// delta is the change of a pool's counters over an interval.
type delta struct {
	transactions, held, acquireTimeouts, queueFull, acquires int64
	heldDuration, acquireWait                                time.Duration
}

// statsDelta returns after's counters minus before's, or ok false (and a
// zero delta) when one of them went backwards.
func statsDelta(before, after pgtx.Stats) (d delta, ok bool) {
	d = delta{
		transactions:    after.TransactionCount - before.TransactionCount,
		held:            after.HeldCount - before.HeldCount,
		heldDuration:    after.HeldDuration - before.HeldDuration,
		acquireTimeouts: after.AcquireTimeoutCount - before.AcquireTimeoutCount,
		queueFull:       after.QueueFullCount - before.QueueFullCount,
		acquires:        after.AcquireWait.Count - before.AcquireWait.Count,
		acquireWait:     after.AcquireWait.Duration - before.AcquireWait.Duration,
	}
	if d.transactions < 0 || d.held < 0 || d.heldDuration < 0 || d.acquireTimeouts < 0 || d.queueFull < 0 ||
		d.acquires < 0 || d.acquireWait < 0 {
		return delta{}, false
	}
	return d, true
}
