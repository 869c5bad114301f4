package pgtxotel

import (
	"github.com/pgtx-go/pgtx"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// labelSets holds everything precomputed for one label: the span name and
// the measurement options of every class, so that recording builds no
// attribute set.
type labelSets struct {
	spanName string
	label    attribute.KeyValue
	hasLabel bool
	// start are the span start options by isolation level (numIsolations-1
	// for a level pgtx does not define).
	start [numIsolations][]trace.SpanStartOption

	classAdd [numClasses][]metric.AddOption    // label + class
	classRec [numClasses][]metric.RecordOption // label + class
	// txAdd and txRec are indexed by [failed][class].
	txAdd         [2][numClasses][]metric.AddOption
	txRec         [2][numClasses][]metric.RecordOption
	commitUnknown []metric.AddOption // label only

	// opOK are the options of db.client.operation.duration for a call that
	// committed, opFailed by class for one that failed without a SQLSTATE;
	// opBase is the attributes they share, for one with a SQLSTATE.
	opOK     []metric.RecordOption
	opFailed [numClasses][]metric.RecordOption
	opBase   []attribute.KeyValue

	// contentionAdd is indexed by limiting (0 or 1); contentionRec is the
	// label's options of pgtx.contention.limit.
	contentionAdd [2][]metric.AddOption
	contentionRec []metric.RecordOption
}

// newLabelSets precomputes the span name and measurement options of label.
func (t *Tracer) newLabelSets(label string) *labelSets {
	ls := &labelSets{spanName: spanName}
	base := append([]attribute.KeyValue(nil), t.attrs...)
	if label != "" {
		ls.spanName = spanName + " " + label
		ls.label = keyLabel.String(label)
		ls.hasLabel = true
		base = append(base, ls.label)
	}
	opt := func(kvs ...attribute.KeyValue) metric.MeasurementOption {
		all := make([]attribute.KeyValue, 0, len(base)+len(kvs))
		all = append(append(all, base...), kvs...)
		return metric.WithAttributeSet(attribute.NewSet(all...))
	}
	for ci := range numClasses {
		class := keyClass.String(classNames[ci])
		o := opt(class)
		ls.classAdd[ci] = []metric.AddOption{o}
		ls.classRec[ci] = []metric.RecordOption{o}
		for failed, outcome := range [2]string{outcomeCommitted, outcomeFailed} {
			o := opt(keyOutcome.String(outcome), class)
			ls.txAdd[failed][ci] = []metric.AddOption{o}
			ls.txRec[failed][ci] = []metric.RecordOption{o}
		}
	}
	ls.commitUnknown = []metric.AddOption{opt()}
	ls.opBase = append(append([]attribute.KeyValue(nil), base...), dbSystem)
	ls.opOK = []metric.RecordOption{opt(dbSystem)}
	for ci := range numClasses {
		ls.opFailed[ci] = []metric.RecordOption{opt(dbSystem, semconv.ErrorTypeKey.String(classNames[ci]))}
	}
	for limiting := range 2 {
		ls.contentionAdd[limiting] = []metric.AddOption{opt(keyLimiting.Bool(limiting == 1))}
	}
	ls.contentionRec = []metric.RecordOption{opt()}
	for ii := range numIsolations {
		ls.start[ii] = t.startOptions(isolationName(ii), ls.label, ls.hasLabel)
	}
	return ls
}

// operationOptions returns the options of a call's
// db.client.operation.duration: precomputed, but for a failure with a
// SQLSTATE (code), whose error.type and db.response.status_code are that
// code.
func (ls *labelSets) operationOptions(failed bool, ci int, code string) []metric.RecordOption {
	switch {
	case !failed:
		return ls.opOK
	case code == "":
		return ls.opFailed[ci]
	}
	kvs := make([]attribute.KeyValue, 0, len(ls.opBase)+2)
	kvs = append(append(kvs, ls.opBase...), semconv.ErrorTypeKey.String(code), semconv.DBResponseStatusCode(code))
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
}

// startOptions returns the options of a call's span.
func (t *Tracer) startOptions(isolation string, label attribute.KeyValue, hasLabel bool) []trace.SpanStartOption {
	attrs := make([]attribute.KeyValue, 0, len(t.spanAttrs)+2)
	attrs = append(attrs, t.spanAttrs...)
	attrs = append(attrs, keyIsolation.String(isolation))
	if hasLabel {
		attrs = append(attrs, label)
	}
	return []trace.SpanStartOption{internalKind, trace.WithAttributes(attrs...)}
}

// internalKind is the kind of pgtx's spans: a transaction and its attempts
// are each an umbrella over several client calls (and backoff sleeps), whose
// client spans are pgx's tracers'.
var internalKind = trace.WithSpanKind(trace.SpanKindInternal)

// numIsolations is the number of pgtx isolation levels plus one slot for
// a value that is not one.
const numIsolations = int(pgtx.Serializable) + 1

func isolationIndex(i pgtx.Isolation) int {
	if i < pgtx.ReadCommitted || i > pgtx.Serializable {
		return 0
	}
	return int(i)
}

// isolationName is the value of pgtx.isolation by slot.
func isolationName(i int) string {
	if i == 0 {
		return "unknown"
	}
	return pgtx.Isolation(i).String()
}

// sets returns the precomputed options of label, building them on first use,
// or t.overflow past the first maxLabels labels.
func (t *Tracer) sets(label string) *labelSets {
	if label == "" {
		return t.noLabel
	}
	if ls, ok := (*t.labels.Load())[label]; ok {
		return ls
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.labels.Load()
	if ls, ok := old[label]; ok {
		return ls
	}
	if len(old) >= maxLabels {
		return t.overflow
	}
	ls := t.newLabelSets(label)
	m := make(map[string]*labelSets, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[label] = ls
	t.labels.Store(&m)
	return ls
}

// The outcomes of a cancel, the values of pgtx.cancel.outcome, derived from
// pgtx.TraceCancelData's Mode, Closed, NotFound and FellBack; 0 is a mode
// this package does not know.
const (
	cancelUnknown = iota
	cancelSignalled
	cancelNotFound
	cancelProtocol
	cancelClosed
	numCancelOutcomes
)

// cancelOutcomeNames are the values of pgtx.cancel.outcome by slot.
var cancelOutcomeNames = [numCancelOutcomes]string{"unknown", "signalled", "not_found", "protocol", "closed"}

// numModes is the number of cancel modes plus one slot for an unknown one.
const numModes = int(pgtx.CancelModeClose) + 2

// outcomeIndex returns the slot of a cancel's outcome: what stopped the
// statement, and for pg_cancel_backend whether the backend was still
// there.
func outcomeIndex(data pgtx.TraceCancelData) int {
	switch {
	case data.Closed:
		return cancelClosed
	case data.NotFound:
		return cancelNotFound
	case data.FellBack || data.Mode == pgtx.CancelModeProtocol:
		return cancelProtocol
	case data.Mode == pgtx.CancelModePool:
		return cancelSignalled
	}
	return cancelUnknown
}

func modeIndex(m pgtx.CancelMode) int {
	if m < pgtx.CancelModePool || m > pgtx.CancelModeClose {
		return numModes - 1
	}
	return int(m)
}

// cancelOutcomeName and cancelModeName are the attribute values by slot.
func cancelOutcomeName(i int) string { return cancelOutcomeNames[i] }

func cancelModeName(i int) string {
	if i == numModes-1 {
		return "unknown"
	}
	return pgtx.CancelMode(i).String()
}

// initCancelSets precomputes the options of the cancel metrics.
func (t *Tracer) initCancelSets() {
	for oi := range numCancelOutcomes {
		for mi := range numModes {
			for fb := range 2 {
				kvs := append(append([]attribute.KeyValue(nil), t.attrs...),
					keyCancelOutcome.String(cancelOutcomeName(oi)),
					keyCancelMode.String(cancelModeName(mi)),
					keyCancelFellBack.Bool(fb == 1))
				o := metric.WithAttributeSet(attribute.NewSet(kvs...))
				t.cancelAdd[oi][mi][fb] = []metric.AddOption{o}
				t.cancelRec[oi][mi][fb] = []metric.RecordOption{o}
			}
		}
	}
}
