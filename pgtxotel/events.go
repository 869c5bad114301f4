package pgtxotel

import (
	"context"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/failover"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// TraceCancel counts the cancellation and, if the span in ctx (the cancelled
// statement's: an otelpgx query span, the attempt's, or the caller's) is
// still recording, adds a "pgtx.cancel" event to it. It may be called after
// the statement returned, from another goroutine.
func (t *Tracer) TraceCancel(ctx context.Context, data pgtx.TraceCancelData) {
	oi, mi, fb := outcomeIndex(data), modeIndex(data.Mode), 0
	if data.FellBack {
		fb = 1
	}
	t.cancels.Add(ctx, 1, t.cancelAdd[oi][mi][fb]...)
	t.cancelLatency.Record(ctx, data.Latency.Seconds(), t.cancelRec[oi][mi][fb]...)

	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent(eventCancel, trace.WithAttributes(
		keyCancelOutcome.String(cancelOutcomeName(oi)),
		keyCancelMode.String(cancelModeName(mi)),
		keyCancelFellBack.Bool(data.FellBack),
		keyCancelLatency.Float64(data.Latency.Seconds()),
		keyCancelPID.Int64(int64(data.PID)),
	))
}

// TraceBreakerStateChange counts a circuit breaker's change of state and,
// if the span in ctx is recording, adds a "pgtx.breaker.state_change" event
// to it. ctx is the context of the call during which the state changed (the
// caller's, outside the call's own span), or context.Background when the
// change was noticed outside a call, by [pgtx.Pool.Stats] or
// [pgtx.Pool.BreakerState].
func (t *Tracer) TraceBreakerStateChange(ctx context.Context, data pgtx.TraceBreakerStateChangeData) {
	from, to := breakerStateName(data.From), breakerStateName(data.To)
	kvs := make([]attribute.KeyValue, 0, len(t.attrs)+3)
	kvs = append(kvs, t.attrs...)
	if data.Name != "" {
		kvs = append(kvs, keyBreakerName.String(data.Name))
	}
	kvs = append(kvs, keyBreakerFrom.String(from), keyBreakerTo.String(to))
	t.breakerChanges.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(kvs...)))

	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 7)
	if data.Name != "" {
		attrs = append(attrs, keyBreakerName.String(data.Name))
	}
	attrs = append(attrs,
		keyBreakerFrom.String(from),
		keyBreakerTo.String(to),
		keyBreakerReason.String(data.Reason),
		keyBreakerCalls.Int64(data.Calls),
		keyBreakerFailures.Int64(data.Failures),
		keyBreakerSlow.Int64(data.Slow),
	)
	span.AddEvent(eventBreaker, trace.WithAttributes(attrs...))
}

// TraceContention records a change of a label's limit by the contention
// manager: it counts the change, sets the pgtx.contention.limit gauge of the
// label to the new limit (0 when the manager stops limiting it) and, if the
// span in ctx (the attempt whose end led to the change) is recording, adds
// a "pgtx.contention.change" event to it.
func (t *Tracer) TraceContention(ctx context.Context, data pgtx.TraceContentionData) {
	ls := t.sets(data.Label)
	limiting := 0
	if data.Limiting {
		limiting = 1
	}
	t.contentionMoves.Add(ctx, 1, ls.contentionAdd[limiting]...)
	t.contentionLimit.Record(ctx, int64(data.Limit), ls.contentionRec...)

	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent(eventContention, trace.WithAttributes(
		keyLabel.String(data.Label),
		keyLimiting.Bool(data.Limiting),
		keyAdmissionLimit.Int(data.Limit),
		keyPreviousLimit.Int(data.Previous),
		keyConflictRatio.Float64(data.ConflictRatio),
	))
}

// TraceCommitLost counts a commit a call reported that a later run of the
// server provably does not have, by the call's label and the server's
// answer. Its context is not a call's: no span records it.
func (t *Tracer) TraceCommitLost(ctx context.Context, data failover.CommitLostData) {
	kvs := make([]attribute.KeyValue, 0, len(t.attrs)+2)
	kvs = append(kvs, t.attrs...)
	if ls := t.sets(data.Label); ls.hasLabel {
		kvs = append(kvs, ls.label) // "_other" past the first labels
	}
	kvs = append(kvs, keyLostStatus.String(data.Status))
	t.commitsLost.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(kvs...)))
}

// TraceReplication sets the pgtx.replication.asynchronous gauge: 1 while
// the pool's server acknowledges commits that no standby has, 0 once it no
// longer does.
func (t *Tracer) TraceReplication(ctx context.Context, data failover.ReplicationData) {
	v := int64(0)
	if data.Asynchronous {
		v = 1
	}
	t.asynchronous.Record(ctx, v, metric.WithAttributeSet(attribute.NewSet(t.attrs...)))
}

// breakerStateName is the value of pgtx.breaker.from and pgtx.breaker.to:
// the state's name, "unknown" for a state this package does not know.
func breakerStateName(s pgtx.BreakerState) string {
	if s < pgtx.BreakerClosed || s > pgtx.BreakerOpen {
		return "unknown"
	}
	return s.String()
}
