// Package storm tells a connection timeout storm from a traffic spike, from
// two snapshots of a [pgtx.Pool]'s statistics.
//
// Both saturate a pool: callers wait for connections, acquires time out, the
// queue fills. Their remedies are opposite. In a timeout storm the database
// (or whatever the transactions wait for) is slow, each transaction holds its
// connection for long, and more connections only send more concurrent work to
// the slow database: shed load or open a circuit breaker instead. In a
// traffic spike the queries are fast but more calls arrive than the pool can
// serve: more capacity (pool size, replicas) or rate limiting helps.
//
// [Diagnose] is a pure function. Take two snapshots with [pgtx.Pool.Stats]
// some seconds apart, measure the interval with the same clock, and pass both:
//
//	before, t0 := pool.Stats(), time.Now()
//	// ... some seconds later ...
//	d := storm.Diagnose(before, pool.Stats(), time.Since(t0), nil)
//	if d.Verdict != storm.Healthy {
//		log.Printf("pool saturated: %v; %s", d, d.Advice)
//	}
//
// The [Diagnosis] carries the verdict, the figures behind it (arrival rate,
// mean hold time, queue depth, utilisation) and the reasons, one sentence
// each.
//
// The fields of [Config] follow the rule of package [pgtx] for every
// configuration field: 0 means the field's documented default, and a
// negative value switches the setting off.
package storm
