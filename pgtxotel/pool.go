package pgtxotel

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgtx-go/pgtx"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Attribute keys of the pool metrics.
const (
	keyPool            = attribute.Key("pgtx.pool")
	keyConnectionState = attribute.Key("pgtx.connection.state")
)

// poolInstruments are the observable instruments of RegisterPoolMetrics.
type poolInstruments struct {
	waiters          metric.Int64ObservableGauge
	connections      metric.Int64ObservableGauge
	maxConnections   metric.Int64ObservableGauge
	acquireTimeouts  metric.Int64ObservableCounter
	queueFull        metric.Int64ObservableCounter
	inFlight         metric.Int64ObservableGauge
	oldestInFlight   metric.Float64ObservableGauge
	acquireWaitTotal metric.Float64ObservableCounter
	acquireWaitCount metric.Int64ObservableCounter
	breakerState     metric.Int64ObservableGauge
	breakerRejected  metric.Int64ObservableCounter
	breakerOpens     metric.Int64ObservableCounter
}

// RegisterPoolMetrics registers asynchronous (observable) instruments that
// report a pool's [pgtx.Stats] on every collection: a single callback reads
// [pgtx.Pool.Stats] once per collection and observes every instrument, so
// they all describe the same moment and the pool pays nothing between
// collections.
//
// Every measurement carries the attribute pgtx.pool=name and those given
// with [WithAttributes]; the meter comes from [WithMeterProvider] (by
// default [otel.GetMeterProvider] at the time of the call), and
// [WithTracerProvider] has no effect. Call it once per pool, with a
// distinct name: for a bulkhead (one [pgtx.Pool] per class of work), once
// per class. The instruments are shared, each call adds its own series.
// Unregister the returned Registration before closing the pool; after
// Unregister the pool is no longer read or reported. A nil pool is an error
// matching [pgtx.ErrInvalidArgument]; an instrument that cannot be created
// is an error too, and nothing is then registered.
//
// The instruments, with durations in seconds:
//
//   - pgtx.pool.waiters {request} (gauge): the queue depth
//     ([pgtx.Stats].Waiting), acquires of a pool connection in progress
//     now. Alert on it staying above 0, not on utilisation: callers that
//     wait mean the pool cannot serve the arrival rate at the current query
//     latency.
//   - pgtx.pool.connections {connection} (gauge): the pool's connections by
//     pgtx.connection.state ("acquired", "idle" or "constructing").
//   - pgtx.pool.max_connections {connection} (gauge): the pool's MaxConns.
//   - pgtx.pool.acquire_timeouts {acquire} (counter): Transaction's waits for
//     a connection ended by [pgtx.Config].AcquireTimeout.
//   - pgtx.pool.queue_full {transaction} (counter): Transaction calls
//     refused at once because [pgtx.Config].MaxWaiters callers were waiting.
//   - pgtx.transactions.in_flight {transaction} (gauge): attempts holding a
//     connection now.
//   - pgtx.transaction.oldest_in_flight (s, gauge): the age of the oldest of
//     them, 0 when there is none.
//   - pgtx.pool.acquire_wait.total (s, counter) and
//     pgtx.pool.acquire_wait.count {acquire} (counter): the total and the
//     number of Transaction's waits for a connection. OpenTelemetry has no
//     observable histogram, and the pool keeps its own, so the distribution
//     is exported as this sum/count pair: the rate of the total over the
//     rate of the count is the mean wait over any interval.
//
// And, only for a pool with a circuit breaker ([pgtx.Config].Breaker):
//
//   - pgtx.breaker.state {state} (gauge): 0 closed, 1 half-open, 2 open.
//   - pgtx.breaker.rejected {transaction} (counter): calls refused while it
//     was open.
//   - pgtx.breaker.opens {open} (counter): the times it opened.
func RegisterPoolMetrics(pool *pgtx.Pool, name string, opts ...Option) (metric.Registration, error) {
	if pool == nil {
		return nil, fmt.Errorf("pgtxotel: RegisterPoolMetrics: nil pool: %w", pgtx.ErrInvalidArgument)
	}
	var c config
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	meter := c.mp.Meter(ScopeName)
	ins, err := newPoolInstruments(meter)
	if err != nil {
		return nil, err
	}

	base := make([]attribute.KeyValue, 0, len(c.attrs)+2)
	base = append(append(base, c.attrs...), keyPool.String(name))
	with := func(kvs ...attribute.KeyValue) metric.ObserveOption {
		all := append(append(make([]attribute.KeyValue, 0, len(base)+len(kvs)), base...), kvs...)
		return metric.WithAttributeSet(attribute.NewSet(all...))
	}
	poolAttrs := with()
	acquired := with(keyConnectionState.String("acquired"))
	idle := with(keyConnectionState.String("idle"))
	constructing := with(keyConnectionState.String("constructing"))

	callback := func(_ context.Context, o metric.Observer) error {
		s := pool.Stats()
		o.ObserveInt64(ins.waiters, s.Waiting, poolAttrs)
		if ps := s.Pool; ps != nil {
			o.ObserveInt64(ins.connections, int64(ps.AcquiredConns()), acquired)
			o.ObserveInt64(ins.connections, int64(ps.IdleConns()), idle)
			o.ObserveInt64(ins.connections, int64(ps.ConstructingConns()), constructing)
			o.ObserveInt64(ins.maxConnections, int64(ps.MaxConns()), poolAttrs)
		}
		o.ObserveInt64(ins.acquireTimeouts, s.AcquireTimeoutCount, poolAttrs)
		o.ObserveInt64(ins.queueFull, s.QueueFullCount, poolAttrs)
		o.ObserveInt64(ins.inFlight, int64(s.InFlight), poolAttrs)
		o.ObserveFloat64(ins.oldestInFlight, s.OldestInFlight.Seconds(), poolAttrs)
		o.ObserveFloat64(ins.acquireWaitTotal, s.AcquireWait.Duration.Seconds(), poolAttrs)
		o.ObserveInt64(ins.acquireWaitCount, s.AcquireWait.Count, poolAttrs)
		if bs := s.Breaker; bs != nil {
			o.ObserveInt64(ins.breakerState, breakerStateValue(bs.State), poolAttrs)
			o.ObserveInt64(ins.breakerRejected, bs.RejectedCount, poolAttrs)
			o.ObserveInt64(ins.breakerOpens, bs.OpenedCount, poolAttrs)
		}
		return nil
	}
	reg, err := meter.RegisterCallback(callback,
		ins.waiters, ins.connections, ins.maxConnections, ins.acquireTimeouts, ins.queueFull,
		ins.inFlight, ins.oldestInFlight, ins.acquireWaitTotal, ins.acquireWaitCount,
		ins.breakerState, ins.breakerRejected, ins.breakerOpens)
	if err != nil {
		return nil, fmt.Errorf("pgtxotel: registering the pool metrics callback: %w", err)
	}
	return reg, nil
}

// newPoolInstruments creates the instruments of RegisterPoolMetrics. The SDK
// returns the same instruments to later calls with the same names, so every
// pool shares them.
func newPoolInstruments(m metric.Meter) (*poolInstruments, error) {
	var (
		ins  poolInstruments
		errs []error
	)
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		i, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		i, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	ins.waiters = gauge("pgtx.pool.waiters", "{request}",
		"Acquires of a pool connection in progress now: the queue depth. Alert on it staying above 0, not on utilisation.")
	ins.connections = gauge("pgtx.pool.connections", "{connection}", "Connections of the pool, by state.")
	ins.maxConnections = gauge("pgtx.pool.max_connections", "{connection}", "Maximum size of the pool.")
	ins.acquireTimeouts = counter("pgtx.pool.acquire_timeouts", "{acquire}",
		"Waits of Transaction for a pool connection ended by the acquire timeout.")
	ins.queueFull = counter("pgtx.pool.queue_full", "{transaction}",
		"Transaction calls refused at once because MaxWaiters callers were waiting for a connection.")
	ins.inFlight = gauge("pgtx.transactions.in_flight", "{transaction}", "Transaction attempts holding a connection now.")
	ins.acquireWaitCount = counter("pgtx.pool.acquire_wait.count", "{acquire}",
		"Waits of Transaction for a pool connection; with pgtx.pool.acquire_wait.total, gives the mean wait.")
	ins.breakerState = gauge("pgtx.breaker.state", "{state}", "State of the pool's circuit breaker: 0 closed, 1 half-open, 2 open.")
	ins.breakerRejected = counter("pgtx.breaker.rejected", "{transaction}", "Transaction calls the circuit breaker refused because it was open.")
	ins.breakerOpens = counter("pgtx.breaker.opens", "{open}", "Times the circuit breaker opened.")

	var err error
	ins.oldestInFlight, err = m.Float64ObservableGauge("pgtx.transaction.oldest_in_flight", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest Transaction attempt holding a connection now, 0 when there is none."))
	errs = append(errs, err)
	ins.acquireWaitTotal, err = m.Float64ObservableCounter("pgtx.pool.acquire_wait.total", metric.WithUnit("s"),
		metric.WithDescription("Total time Transaction waited for a pool connection; divided by pgtx.pool.acquire_wait.count, the mean wait."))
	errs = append(errs, err)

	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(errors.New("pgtxotel: creating pool metric instruments"), err)
	}
	return &ins, nil
}

// breakerStateValue is the value of pgtx.breaker.state: 0 closed, 1
// half-open, 2 open, in the order of increasing trouble; -1 for a state this
// package does not know. The values are this package's, by state, whatever
// numbers pgtx.BreakerState gives the states.
func breakerStateValue(s pgtx.BreakerState) int64 {
	switch s {
	case pgtx.BreakerClosed:
		return 0
	case pgtx.BreakerHalfOpen:
		return 1
	case pgtx.BreakerOpen:
		return 2
	}
	return -1
}
