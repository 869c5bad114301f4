package pgtxotel

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/failover"
	"github.com/pgtx-go/pgtx/slots"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"
	"go.opentelemetry.io/otel/trace"
)

// maxLabels bounds the distinct labels that get their own metric series;
// further labels share otherLabel.
const (
	maxLabels  = 256
	otherLabel = "_other"
)

// operationBuckets are the advisory boundaries the convention gives
// db.client.operation.duration, in seconds.
var operationBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}

// durationBuckets are the boundaries of pgtx's own duration histograms
// (backoff, cancel latency, connection wait and use), in seconds: those of
// [pgtx.Histogram], from a millisecond to ten seconds.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

var dbSystem = semconv.DBSystemNamePostgreSQL

// numClasses is the number of pgtx classes plus one slot for a class pgtx
// does not (yet) define.
const numClasses = int(pgtx.ClassPermanent) + 2

// classIndex maps c to its slot in the per-class tables.
func classIndex(c pgtx.Class) int {
	if c < pgtx.Class(0) || c > pgtx.ClassPermanent {
		return numClasses - 1
	}
	return int(c)
}

// classNames are the values of pgtx.class (and of error.type without a
// SQLSTATE) by slot: "unknown" for a class pgtx does not define.
var classNames = func() [numClasses]string {
	var n [numClasses]string
	for i := range n {
		n[i] = pgtx.Class(i).String()
	}
	n[numClasses-1] = "unknown"
	return n
}()

// Tracer reports pgtx calls as OpenTelemetry spans and metrics. It
// implements every tracer interface of pgtx: [pgtx.TransactionTracer],
// [pgtx.CancelTracer], [pgtx.BreakerTracer], [pgtx.ContentionTracer],
// [failover.Tracer] and [slots.Tracer]; set as [pgtx.Config].Tracer it
// receives the events of the pool's calls, cancels, circuit breaker,
// contention manager, failovers and connection slots. docs/observability.md lists its spans, events and
// instruments. A Tracer is safe for concurrent use and may be shared by
// several pools.
type Tracer struct {
	tracer    trace.Tracer
	spanAttrs []attribute.KeyValue // db.system.name and those of WithAttributes
	attrs     []attribute.KeyValue // those of WithAttributes

	operation       metric.Float64Histogram // db.client.operation.duration
	transactions    metric.Int64Counter
	attempts        metric.Int64Counter
	retries         metric.Int64Counter
	backoff         metric.Float64Histogram
	commitUnknown   metric.Int64Counter
	budgetExhausted metric.Int64Counter
	cancels         metric.Int64Counter
	cancelLatency   metric.Float64Histogram
	breakerChanges  metric.Int64Counter
	contentionLimit metric.Int64Gauge
	contentionMoves metric.Int64Counter
	commitsLost     metric.Int64Counter
	asynchronous    metric.Int64Gauge

	// noLabel holds the measurement options of calls without a label;
	// labels those of labelled calls, copied on write so that lookups take
	// no lock and allocate nothing.
	noLabel *labelSets
	labels  atomic.Pointer[map[string]*labelSets]
	mu      sync.Mutex // serialises writers of labels
	// overflow is shared by the labels past the first maxLabels.
	overflow *labelSets

	// cancelAdd[outcome][mode][fellBack] and cancelRec are the measurement
	// options of the cancel metrics.
	cancelAdd [numCancelOutcomes][numModes][2][]metric.AddOption
	cancelRec [numCancelOutcomes][numModes][2][]metric.RecordOption
}

// Compile-time checks of the interfaces pgtx looks for.
var (
	_ pgtx.TransactionTracer = (*Tracer)(nil)
	_ pgtx.CancelTracer      = (*Tracer)(nil)
	_ pgtx.BreakerTracer     = (*Tracer)(nil)
	_ pgtx.ContentionTracer  = (*Tracer)(nil)
	_ failover.Tracer        = (*Tracer)(nil)
	_ slots.Tracer           = (*Tracer)(nil)
)

// NewTracer returns a [Tracer] configured by opts (nil options are
// skipped). A metric instrument that cannot be created is reported to
// [otel.Handle], as OpenTelemetry's instrumentation libraries do, and the
// Tracer's metrics are then not recorded; its spans still are.
func NewTracer(opts ...TracerOption) *Tracer {
	c := newTracerConfig(opts)
	t := &Tracer{
		tracer:    c.tp.Tracer(ScopeName),
		spanAttrs: append([]attribute.KeyValue{dbSystem}, c.attrs...),
		attrs:     c.attrs,
	}
	if err := t.initInstruments(c.mp.Meter(ScopeName)); err != nil {
		otel.Handle(err)
		// A no-op meter creates every instrument without an error.
		_ = t.initInstruments(noop.NewMeterProvider().Meter(ScopeName))
	}
	t.noLabel = t.newLabelSets("")
	t.overflow = t.newLabelSets(otherLabel)
	empty := map[string]*labelSets{}
	t.labels.Store(&empty)
	t.initCancelSets()
	return t
}

// initInstruments creates the metric instruments.
func (t *Tracer) initInstruments(m metric.Meter) error {
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		i, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		i, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		errs = append(errs, err)
		return i
	}
	op, err := dbconv.NewClientOperationDuration(m, metric.WithExplicitBucketBoundaries(operationBuckets...))
	errs = append(errs, err)
	t.operation = op.Inst()
	t.transactions = counter("pgtx.transaction.count", "{transaction}", "Transaction calls ended, by outcome and class.")
	t.attempts = counter("pgtx.attempt.count", "{attempt}", "Attempts of Transaction calls, by the class of their result.")
	t.retries = counter("pgtx.retry.count", "{retry}", "Attempts followed by another, by the class of the error that caused the retry.")
	t.backoff = histogram("pgtx.retry.backoff", "Pause before a retry.")
	t.commitUnknown = counter("pgtx.commit_unknown.count", "{transaction}", "Transaction calls whose COMMIT outcome is unknown.")
	t.budgetExhausted = counter("pgtx.retry_budget.refusal.count", "{retry}", "Retries refused by the pool's retry budget.")
	t.cancels = counter("pgtx.cancel.count", "{cancel}", "Statements cancelled because their context ended, by outcome.")
	t.cancelLatency = histogram("pgtx.cancel.latency", "Time from a context's end to the cancel's answer.")
	t.breakerChanges = counter("pgtx.breaker.transition.count", "{transition}", "Changes of state of circuit breakers, by breaker name and the states left and entered.")
	t.contentionMoves = counter("pgtx.contention.change.count", "{change}", "Changes of a label's limit by the contention manager.")
	t.contentionLimit, err = m.Int64Gauge("pgtx.contention.limit", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts of the label the contention manager lets run at once, 0 while it does not limit them; set at each change."))
	errs = append(errs, err)
	t.commitsLost = counter("pgtx.commit_lost.count", "{transaction}",
		"Commits Transaction calls reported that a later run of the server (a failover, a restart) provably does not have.")
	t.asynchronous, err = m.Int64Gauge("pgtx.replication.asynchronous", metric.WithUnit("1"),
		metric.WithDescription("1 while the pool's server acknowledges commits that no standby has (standbys stream, none synchronous), 0 once it no longer does; set at each change."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return errors.Join(errors.New("pgtxotel: creating metric instruments"), err)
	}
	return nil
}

// spanKey and attemptKey are the context keys of the call's span and of
// the attempt's. pgtx hands the context TraceTransactionStart (or
// TraceAttemptStart) returned to the other methods; the keys make sure they
// only ever touch (and end) a span this Tracer started, never a span of the
// caller's.
type (
	spanKey    struct{}
	attemptKey struct{}
)

// callSpan returns the recording span TraceTransactionStart put in ctx, or
// nil.
func callSpan(ctx context.Context) trace.Span {
	span, _ := ctx.Value(spanKey{}).(trace.Span)
	return span
}

// attemptSpan returns the recording span TraceAttemptStart put in ctx, or
// nil.
func attemptSpan(ctx context.Context) trace.Span {
	span, _ := ctx.Value(attemptKey{}).(trace.Span)
	return span
}

// TraceTransactionStart starts the call's span, of kind internal, a child
// of the span in ctx, and returns ctx with it, so the attempts' spans nest
// under it.
func (t *Tracer) TraceTransactionStart(ctx context.Context, data pgtx.TraceTransactionStartData) context.Context {
	ls := t.sets(data.Label)
	name, opts := ls.spanName, ls.start[isolationIndex(data.Isolation)]
	if ls == t.overflow {
		name = spanName + " " + data.Label
		opts = t.startOptions(isolationName(isolationIndex(data.Isolation)), keyLabel.String(data.Label), true)
	}
	ctx, span := t.tracer.Start(ctx, name, opts...)
	if !span.IsRecording() {
		// Sampled out: nothing to add to it, and ending it is a no-op.
		return ctx
	}
	return context.WithValue(ctx, spanKey{}, span)
}

// TraceAttemptStart starts the attempt's span, "pgtx.attempt", of kind
// internal, a child of the call's span, and returns ctx with it: fn
// receives that context, so the spans of pgx's tracers (otelpgx's query
// spans) nest under the attempt. It starts nothing when the call's span is
// not recording.
func (t *Tracer) TraceAttemptStart(ctx context.Context, data pgtx.TraceAttemptStartData) context.Context {
	if callSpan(ctx) == nil {
		return ctx
	}
	attrs := make([]attribute.KeyValue, 0, len(t.attrs)+1)
	attrs = append(append(attrs, t.attrs...), keyAttemptNumber.Int(data.Attempt))
	ctx, span := t.tracer.Start(ctx, attemptSpanName, internalKind, trace.WithAttributes(attrs...))
	if !span.IsRecording() {
		return ctx
	}
	return context.WithValue(ctx, attemptKey{}, span)
}

// TraceAttemptEnd counts the attempt, and the retry if one follows, and
// ends the attempt's span with its class, retry decision and error. A
// retry the retry budget refused (no retry follows and the error matches
// [pgtx.ErrRetryBudgetExhausted]) is counted too.
func (t *Tracer) TraceAttemptEnd(ctx context.Context, data pgtx.TraceAttemptEndData) {
	ls := t.sets(data.Label)
	ci := classIndex(data.Class)
	t.attempts.Add(ctx, 1, ls.classAdd[ci]...)
	if data.Retry {
		t.retries.Add(ctx, 1, ls.classAdd[ci]...)
		t.backoff.Record(ctx, data.Backoff.Seconds(), ls.classRec[ci]...)
	} else if data.Err != nil && errors.Is(data.Err, pgtx.ErrRetryBudgetExhausted) {
		t.budgetExhausted.Add(ctx, 1, ls.classAdd[ci]...)
	}

	span := attemptSpan(ctx)
	if span == nil {
		return
	}
	var buf [10]attribute.KeyValue
	attrs := append(buf[:0], keyClass.String(classNames[ci]), keyRetry.Bool(data.Retry))
	if data.Retry {
		attrs = append(attrs, keyBackoff.Float64(data.Backoff.Seconds()))
	}
	if data.Limit > 0 {
		attrs = append(attrs, keyAdmissionWait.Float64(data.AdmissionWait.Seconds()), keyAdmissionLimit.Int(data.Limit))
	}
	if data.Err != nil {
		attrs = appendErrorAttrs(attrs, data.Err, classNames[ci])
		span.SetStatus(codes.Error, data.Err.Error())
	}
	span.SetAttributes(attrs...)
	span.End()
}

// TraceTransactionEnd records the call's db.client.operation.duration and
// outcome, and ends its span with them.
func (t *Tracer) TraceTransactionEnd(ctx context.Context, data pgtx.TraceTransactionEndData) {
	ls := t.sets(data.Label)
	class, failed := data.Class, 0
	if data.Err != nil {
		failed = 1
		if class == pgtx.Class(0) {
			class = pgtx.Classify(data.Err)
		}
	}
	ci := classIndex(class)
	code := ""
	if data.Err != nil {
		code = sqlState(data.Err)
	}
	t.transactions.Add(ctx, 1, ls.txAdd[failed][ci]...)
	t.operation.Record(ctx, data.Duration.Seconds(), ls.operationOptions(data.Err != nil, ci, code)...)
	if data.Err != nil && errors.Is(data.Err, pgtx.ErrCommitUnknown) {
		t.commitUnknown.Add(ctx, 1, ls.commitUnknown...)
	}

	span := callSpan(ctx)
	if span == nil {
		return
	}
	if data.Err == nil {
		span.SetAttributes(keyAttemptCount.Int(data.Attempts))
		span.End()
		return
	}
	var buf [7]attribute.KeyValue
	attrs := append(buf[:0], keyAttemptCount.Int(data.Attempts), keyClass.String(classNames[ci]))
	span.SetAttributes(appendErrorAttrs(attrs, data.Err, classNames[ci])...)
	span.RecordError(data.Err)
	span.SetStatus(codes.Error, data.Err.Error())
	span.End()
}

// errorType is the value of error.type for a failure of class class: the
// SQLSTATE when the error carries one (as the convention asks: error.type
// matches db.response.status_code), else the class.
func errorType(code, class string) string {
	if code != "" {
		return code
	}
	return class
}

// appendErrorAttrs appends the attributes describing a failed attempt or
// call: error.type, the SQLSTATE and the markers pgtx puts on
// errors.
func appendErrorAttrs(attrs []attribute.KeyValue, err error, class string) []attribute.KeyValue {
	code := sqlState(err)
	attrs = append(attrs, semconv.ErrorTypeKey.String(errorType(code, class)))
	if code != "" {
		attrs = append(attrs, semconv.DBResponseStatusCode(code))
	}
	if errors.Is(err, pgtx.ErrCommitUnknown) {
		attrs = append(attrs, keyCommitUnknown.Bool(true))
	}
	if errors.Is(err, pgtx.ErrRetryBudgetExhausted) {
		attrs = append(attrs, keyBudgetExhausted.Bool(true))
	}
	return attrs
}

// sqlState returns the SQLSTATE of the first *pgconn.PgError in err's tree,
// or "".
func sqlState(err error) string {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pgErr.Code
	}
	return ""
}
