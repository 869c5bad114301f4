package storm

import "strconv"

// Verdict is what [Diagnose] makes of a pool's interval: healthy, or
// saturated for one of two reasons. The remedies of the two are opposite:
// more connections cure a traffic spike and deepen a timeout storm.
type Verdict int

// The verdicts of [Diagnose].
const (
	// Healthy means the pool is not saturated: callers do not wait for
	// connections and the offered load is below 90% of the pool.
	Healthy Verdict = iota
	// TimeoutStorm means the pool is saturated because connections are held
	// for long: the database (or whatever the transactions wait for) is
	// slow. Shed load or open a circuit breaker; do not grow the pool, which
	// sends more concurrent work to the slow database.
	TimeoutStorm
	// TrafficSpike means the pool is saturated although connections are
	// returned quickly: more calls arrive than the pool can serve. More
	// capacity (pool size, replicas) or rate limiting helps.
	TrafficSpike
)

// String returns "healthy", "timeout storm" or "traffic spike", or
// "Verdict(n)" for a value that is none of them.
func (v Verdict) String() string {
	switch v {
	case Healthy:
		return "healthy"
	case TimeoutStorm:
		return "timeout storm"
	case TrafficSpike:
		return "traffic spike"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}
