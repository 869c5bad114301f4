package pgtxotel

import (
	"context"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/slots"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// slotInstruments are the observable instruments of a pool's
// [slots.Stats], observed by [RegisterPoolMetrics].
type slotInstruments struct {
	limit                          metric.Int64ObservableUpDownCounter
	refused, probes, raised, waits metric.Int64ObservableCounter
	waitTime                       metric.Float64ObservableCounter
}

// newSlotInstruments creates the slot instruments, appending the errors to
// errs.
func newSlotInstruments(m metric.Meter, errs *[]error) slotInstruments {
	var ins slotInstruments
	var err error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		i, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		*errs = append(*errs, err)
		return i
	}
	ins.limit, err = m.Int64ObservableUpDownCounter("pgtx.slot.limit", metric.WithUnit("{connection}"),
		metric.WithDescription("Connections the pool lets itself hold: its maximum until a connect is refused for lack of slots while it holds some, then what it held, raised by each probe that connects."))
	*errs = append(*errs, err)
	ins.refused = counter("pgtx.slot.refusal.count", "{connect}",
		"Connects the server or a pooler refused for lack of connection slots (53300, too many clients).")
	ins.probes = counter("pgtx.slot.probe.count", "{connect}",
		"Connects let through beyond the pool's slot limit, about one every 2s while the limit is below the maximum.")
	ins.raised = counter("pgtx.slot.raise.count", "{connect}",
		"Probes that connected and raised the pool's slot limit.")
	ins.waits = counter("pgtx.slot.wait.count", "{acquire}",
		"Acquires that waited for a connection the pool held, instead of connecting, because the server had no slot.")
	ins.waitTime, err = m.Float64ObservableCounter("pgtx.slot.wait.time", metric.WithUnit("s"),
		metric.WithDescription("Total time acquires waited for a connection the pool held because the server had no slot."))
	*errs = append(*errs, err)
	return ins
}

// all returns the instruments, to register with a callback.
func (ins *slotInstruments) all() []metric.Observable {
	return []metric.Observable{ins.limit, ins.refused, ins.probes, ins.raised, ins.waits, ins.waitTime}
}

// observe observes s with opt.
func (ins *slotInstruments) observe(o metric.Observer, s slots.Stats, opt metric.ObserveOption) {
	o.ObserveInt64(ins.limit, int64(s.Limit), opt)
	o.ObserveInt64(ins.refused, s.RefusedCount, opt)
	o.ObserveInt64(ins.probes, s.ProbeCount, opt)
	o.ObserveInt64(ins.raised, s.RaisedCount, opt)
	o.ObserveInt64(ins.waits, s.WaitCount, opt)
	o.ObserveFloat64(ins.waitTime, s.WaitDuration.Seconds(), opt)
}

// slotPoolName is the value of pgtx.slot.pool: "main" or "cancel".
func slotPoolName(cancelPool bool) string {
	if cancelPool {
		return "cancel"
	}
	return "main"
}

// TraceSlots adds a "pgtx.slot" event to the span in ctx, the acquiring
// attempt's, if it is still recording: a connect refused for lack of
// slots, a limit raised, or a wait for a held connection. [RegisterPoolMetrics]
// counts them.
func (t *Tracer) TraceSlots(ctx context.Context, data slots.Data) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs,
		keySlotEvent.String(data.Event.String()),
		keySlotPool.String(slotPoolName(data.CancelPool)),
		keySlotLimit.Int64(int64(data.Limit)),
		keySlotHeld.Int64(int64(data.Held)))
	if data.Event == slots.Waited {
		attrs = append(attrs, keySlotWait.Float64(data.Wait.Seconds()))
	}
	if data.Err != nil {
		code := sqlState(data.Err)
		attrs = append(attrs, semconv.ErrorTypeKey.String(errorType(code, classNames[classIndex(pgtx.ClassOverload)])))
		if code != "" {
			attrs = append(attrs, semconv.DBResponseStatusCode(code))
		}
	}
	span.AddEvent(eventSlot, trace.WithAttributes(attrs...))
}
