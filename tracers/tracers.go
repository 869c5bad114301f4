package tracers

import (
	"context"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/failover"
	"github.com/pgtx-go/pgtx/pooler"
)

// Tracer sends every event to each of its tracers, in the order given to
// [Join]. It implements every tracer interface of pgtx.
type Tracer struct {
	tx         []pgtx.TransactionTracer
	cancel     []pgtx.CancelTracer
	contention []pgtx.ContentionTracer
	breaker    []pgtx.BreakerTracer
	failover   []failover.Tracer
	pooler     []pooler.Tracer
}

var (
	_ pgtx.TransactionTracer = (*Tracer)(nil)
	_ pgtx.CancelTracer      = (*Tracer)(nil)
	_ pgtx.ContentionTracer  = (*Tracer)(nil)
	_ pgtx.BreakerTracer     = (*Tracer)(nil)
	_ failover.Tracer        = (*Tracer)(nil)
	_ pooler.Tracer          = (*Tracer)(nil)
)

// Join returns a [Tracer] over tracers; nil entries are skipped, and with
// none left it does nothing. Each tracer's start methods receive the
// context the tracer before it returned, so every tracer finds its own
// values (a span, a start time) in the context its end methods receive.
func Join(tracers ...pgtx.TransactionTracer) *Tracer {
	t := &Tracer{}
	for _, tr := range tracers {
		if tr == nil {
			continue
		}
		t.tx = append(t.tx, tr)
		if c, ok := tr.(pgtx.CancelTracer); ok {
			t.cancel = append(t.cancel, c)
		}
		if c, ok := tr.(pgtx.ContentionTracer); ok {
			t.contention = append(t.contention, c)
		}
		if b, ok := tr.(pgtx.BreakerTracer); ok {
			t.breaker = append(t.breaker, b)
		}
		if f, ok := tr.(failover.Tracer); ok {
			t.failover = append(t.failover, f)
		}
		if p, ok := tr.(pooler.Tracer); ok {
			t.pooler = append(t.pooler, p)
		}
	}
	return t
}

// TraceTransactionStart calls each tracer's TraceTransactionStart in turn,
// passing on the context each returns.
func (t *Tracer) TraceTransactionStart(ctx context.Context, data pgtx.TraceTransactionStartData) context.Context {
	for _, tr := range t.tx {
		ctx = tr.TraceTransactionStart(ctx, data)
	}
	return ctx
}

// TraceTransactionEnd calls each tracer's TraceTransactionEnd.
func (t *Tracer) TraceTransactionEnd(ctx context.Context, data pgtx.TraceTransactionEndData) {
	for _, tr := range t.tx {
		tr.TraceTransactionEnd(ctx, data)
	}
}

// TraceAttemptStart calls each tracer's TraceAttemptStart in turn, passing
// on the context each returns.
func (t *Tracer) TraceAttemptStart(ctx context.Context, data pgtx.TraceAttemptStartData) context.Context {
	for _, tr := range t.tx {
		ctx = tr.TraceAttemptStart(ctx, data)
	}
	return ctx
}

// TraceAttemptEnd calls each tracer's TraceAttemptEnd.
func (t *Tracer) TraceAttemptEnd(ctx context.Context, data pgtx.TraceAttemptEndData) {
	for _, tr := range t.tx {
		tr.TraceAttemptEnd(ctx, data)
	}
}

// TraceCancel calls TraceCancel of each tracer that is a [pgtx.CancelTracer].
func (t *Tracer) TraceCancel(ctx context.Context, data pgtx.TraceCancelData) {
	for _, tr := range t.cancel {
		tr.TraceCancel(ctx, data)
	}
}

// TraceContention calls TraceContention of each tracer that is a
// [pgtx.ContentionTracer].
func (t *Tracer) TraceContention(ctx context.Context, data pgtx.TraceContentionData) {
	for _, tr := range t.contention {
		tr.TraceContention(ctx, data)
	}
}

// TraceBreakerStateChange calls TraceBreakerStateChange of each tracer that
// is a [pgtx.BreakerTracer].
func (t *Tracer) TraceBreakerStateChange(ctx context.Context, data pgtx.TraceBreakerStateChangeData) {
	for _, tr := range t.breaker {
		tr.TraceBreakerStateChange(ctx, data)
	}
}

// TraceCommitLost calls TraceCommitLost of each tracer that is a
// [failover.Tracer].
func (t *Tracer) TraceCommitLost(ctx context.Context, data failover.CommitLostData) {
	for _, tr := range t.failover {
		tr.TraceCommitLost(ctx, data)
	}
}

// TraceReplication calls TraceReplication of each tracer that is a
// [failover.Tracer].
func (t *Tracer) TraceReplication(ctx context.Context, data failover.ReplicationData) {
	for _, tr := range t.failover {
		tr.TraceReplication(ctx, data)
	}
}

// TracePooler calls TracePooler of each tracer that implements
// [pooler.Tracer].
func (t *Tracer) TracePooler(ctx context.Context, data pooler.Data) {
	for _, tr := range t.pooler {
		tr.TracePooler(ctx, data)
	}
}
