package pgtxotel

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgtx-go/pgtx"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"
)

// poolInstruments are the observable instruments of RegisterPoolMetrics.
type poolInstruments struct {
	connections     metric.Int64ObservableUpDownCounter // db.client.connection.count
	maxConnections  metric.Int64ObservableUpDownCounter // db.client.connection.max
	pending         metric.Int64ObservableUpDownCounter // db.client.connection.pending_requests
	timeouts        metric.Int64ObservableCounter       // db.client.connection.timeouts
	queueFull       metric.Int64ObservableCounter
	inFlight        metric.Int64ObservableUpDownCounter
	oldestInFlight  metric.Float64ObservableGauge
	breakerState    metric.Int64ObservableGauge
	breakerRejected metric.Int64ObservableCounter
	breakerOpens    metric.Int64ObservableCounter
	slots           slotInstruments // pgtx.slot.*
}

// RegisterPoolMetrics registers observable instruments that report a
// pool's [pgtx.Stats] at each collection: one callback reads the
// statistics once and observes every instrument, so they all describe the
// same moment and the pool pays nothing between collections. They are the
// convention's db.client.connection.count, .max, .pending_requests (the
// queue depth) and .timeouts, and pgtx's pool, breaker and connection
// slot signals; docs/observability.md lists them. The slot instruments
// (pgtx.slot.*) carry pgtx.slot.pool=main, or =cancel for the cancel
// pool's, which is observed only when the pool has one.
//
// Every measurement carries db.client.connection.pool.name=name and the
// attributes of [WithAttributes]. Call it once per pool, with a distinct
// name, the same as the pool's [PoolTracer]'s. Unregister the returned
// Registration before closing the pool. A nil pool is an error matching
// [pgtx.ErrInvalidArgument]; an instrument that cannot be created is an
// error too, and nothing is then registered.
func RegisterPoolMetrics(pool *pgtx.Pool, name string, opts ...PoolOption) (metric.Registration, error) {
	if pool == nil {
		return nil, fmt.Errorf("pgtxotel: RegisterPoolMetrics %q: nil pool: %w", name, pgtx.ErrInvalidArgument)
	}
	c := newPoolConfig(opts)
	meter := c.mp.Meter(ScopeName)
	ins, err := newPoolInstruments(meter)
	if err != nil {
		return nil, err
	}

	base := poolAttrs(c.attrs, name)
	with := func(kvs ...attribute.KeyValue) metric.ObserveOption {
		all := append(append(make([]attribute.KeyValue, 0, len(base)+len(kvs)), base...), kvs...)
		return metric.WithAttributeSet(attribute.NewSet(all...))
	}
	poolOpt := with()
	used := with(semconv.DBClientConnectionStateUsed)
	idle := with(semconv.DBClientConnectionStateIdle)
	mainSlots := with(keySlotPool.String(slotPoolName(false)))
	cancelSlots := with(keySlotPool.String(slotPoolName(true)))

	callback := func(_ context.Context, o metric.Observer) error {
		s := pool.Stats()
		if ps := s.Pool; ps != nil {
			o.ObserveInt64(ins.connections, int64(ps.AcquiredConns()), used)
			o.ObserveInt64(ins.connections, int64(ps.IdleConns()), idle)
			o.ObserveInt64(ins.maxConnections, int64(ps.MaxConns()), poolOpt)
		}
		o.ObserveInt64(ins.pending, s.Waiting, poolOpt)
		o.ObserveInt64(ins.timeouts, s.AcquireTimeoutCount, poolOpt)
		o.ObserveInt64(ins.queueFull, s.QueueFullCount, poolOpt)
		o.ObserveInt64(ins.inFlight, int64(s.InFlight), poolOpt)
		o.ObserveFloat64(ins.oldestInFlight, s.OldestInFlight.Seconds(), poolOpt)
		if bs := s.Breaker; bs != nil {
			o.ObserveInt64(ins.breakerState, breakerStateValue(bs.State), poolOpt)
			o.ObserveInt64(ins.breakerRejected, bs.RejectedCount, poolOpt)
			o.ObserveInt64(ins.breakerOpens, bs.OpenedCount, poolOpt)
		}
		ins.slots.observe(o, s.Slots, mainSlots)
		if s.CancelSlots.Limit > 0 { // a cancel pool's limit is never 0
			ins.slots.observe(o, s.CancelSlots, cancelSlots)
		}
		return nil
	}
	reg, err := meter.RegisterCallback(callback, append([]metric.Observable{
		ins.connections, ins.maxConnections, ins.pending, ins.timeouts, ins.queueFull,
		ins.inFlight, ins.oldestInFlight, ins.breakerState, ins.breakerRejected, ins.breakerOpens},
		ins.slots.all()...)...)
	if err != nil {
		return nil, fmt.Errorf("pgtxotel: registering the pool metrics callback: %w", err)
	}
	return reg, nil
}

// poolAttrs returns attrs followed by db.client.connection.pool.name=name.
func poolAttrs(attrs []attribute.KeyValue, name string) []attribute.KeyValue {
	base := make([]attribute.KeyValue, 0, len(attrs)+1)
	return append(append(base, attrs...), semconv.DBClientConnectionPoolName(name))
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
	count, err := dbconv.NewClientConnectionCountObservable(m)
	errs = append(errs, err)
	ins.connections = count.Inst()
	maxConns, err := dbconv.NewClientConnectionMaxObservable(m)
	errs = append(errs, err)
	ins.maxConnections = maxConns.Inst()
	pending, err := dbconv.NewClientConnectionPendingRequestsObservable(m,
		metric.WithDescription("Acquires of a pool connection in progress now: the queue depth. Alert on it staying above 0, not on utilisation."))
	errs = append(errs, err)
	ins.pending = pending.Inst()
	timeouts, err := dbconv.NewClientConnectionTimeoutsObservable(m,
		metric.WithDescription("Waits of Transaction for a pool connection ended by the acquire timeout."))
	errs = append(errs, err)
	ins.timeouts = timeouts.Inst()

	ins.queueFull = counter("pgtx.pool.queue_full.count", "{transaction}",
		"Transaction calls refused at once because MaxWaiters callers were waiting for a connection.")
	ins.inFlight, err = m.Int64ObservableUpDownCounter("pgtx.pool.in_flight", metric.WithUnit("{transaction}"),
		metric.WithDescription("Transaction attempts holding a connection now."))
	errs = append(errs, err)
	ins.oldestInFlight, err = m.Float64ObservableGauge("pgtx.pool.oldest_in_flight", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest Transaction attempt holding a connection now, 0 when there is none."))
	errs = append(errs, err)
	ins.breakerState = gauge("pgtx.breaker.state", "{state}", "State of the pool's circuit breaker: 0 closed, 1 half-open, 2 open.")
	ins.breakerRejected = counter("pgtx.breaker.rejection.count", "{transaction}", "Transaction calls the circuit breaker refused because it was open.")
	ins.breakerOpens = counter("pgtx.breaker.open.count", "{open}", "Times the circuit breaker opened.")
	ins.slots = newSlotInstruments(m, &errs)

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
