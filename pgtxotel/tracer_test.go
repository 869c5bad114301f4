package pgtxotel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// harness is a Tracer wired to in-memory span and metric readers.
type harness struct {
	tr     *Tracer
	tp     *sdktrace.TracerProvider
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
}

func newHarness(t *testing.T, opts ...TracerOption) *harness {
	t.Helper()
	return newHarnessSampler(t, sdktrace.AlwaysSample(), opts...)
}

// eventOn calls fn with a context whose span, named spanName, is recording,
// already ended or absent (span "recording", "ended" or "none"). It returns
// the one event, named event, that the ended spans hold when span is
// "recording", and nil otherwise, when they must hold none.
func (h *harness) eventOn(t *testing.T, span, spanName, event string, fn func(context.Context)) *sdktrace.Event {
	t.Helper()
	ctx := context.Background()
	var s trace.Span
	if span != "none" {
		ctx, s = h.tp.Tracer("test").Start(ctx, spanName)
	}
	if span == "ended" {
		s.End()
	}
	fn(ctx)
	if span == "recording" {
		s.End()
	}
	var events []sdktrace.Event
	for _, ended := range h.spans.Ended() {
		events = append(events, ended.Events()...)
	}
	if span != "recording" {
		if len(events) != 0 {
			t.Errorf("events = %v, want none", events)
		}
		return nil
	}
	if len(events) != 1 || events[0].Name != event {
		t.Fatalf("events = %v, want one %s", events, event)
	}
	return &events[0]
}

func newHarnessSampler(t *testing.T, sampler sdktrace.Sampler, opts ...TracerOption) *harness {
	t.Helper()
	h := &harness{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans), sdktrace.WithSampler(sampler))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	t.Cleanup(func() {
		_ = h.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	h.tr = NewTracer(append([]TracerOption{WithTracerProvider(h.tp), WithMeterProvider(mp)}, opts...)...)
	return h
}

// attempt is one crafted attempt of a call.
type attempt struct {
	err     error
	retry   bool
	backoff time.Duration
	// budget: the retry budget refused a retry of this attempt: it is the
	// last, without a retry, and its error matches
	// pgtx.ErrRetryBudgetExhausted.
	budget bool
}

// call is a crafted Transaction call.
type call struct {
	label    string
	iso      pgtx.Isolation
	attempts []attempt
	// endErr and endClass override the call's error and class, which are
	// otherwise the last attempt's, as in pgtx's retry loop.
	endErr   error
	endClass pgtx.Class
	override bool
}

func (c call) result() (pgtx.Class, error) {
	if c.override {
		return c.endClass, c.endErr
	}
	err := c.attempts[len(c.attempts)-1].err
	return pgtx.Classify(err), err
}

// run drives tr the way pgtx's retry loop does. childOf, if not nil,
// receives the context fn would get, on the first attempt.
func run(ctx context.Context, tr *Tracer, c call, childOf func(context.Context)) {
	callCtx := tr.TraceTransactionStart(ctx, pgtx.TraceTransactionStartData{Label: c.label, Isolation: c.iso})
	for i, a := range c.attempts {
		n := i + 1
		actx := tr.TraceAttemptStart(callCtx, pgtx.TraceAttemptStartData{Label: c.label, Isolation: c.iso, Attempt: n})
		if n == 1 && childOf != nil {
			childOf(actx)
		}
		class := pgtx.Classify(a.err)
		tr.TraceAttemptEnd(actx, pgtx.TraceAttemptEndData{
			Label: c.label, Isolation: c.iso, Attempt: n,
			Err: a.err, Class: class, Duration: time.Duration(n) * time.Millisecond,
			Retry: a.retry, Backoff: a.backoff,
		})
	}
	class, err := c.result()
	tr.TraceTransactionEnd(callCtx, pgtx.TraceTransactionEndData{
		Label: c.label, Isolation: c.iso, Attempts: len(c.attempts),
		Err: err, Class: class, Duration: 250 * time.Millisecond,
	})
}

func pgErr(code string) error {
	return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "crafted " + code}
}

// TestTransaction scripts four calls the way pgtx's retry loop reports them
// (a conflict retry, an overload retry, a cancelled statement and an
// ambiguous COMMIT) and checks every span, span event and measurement.
func TestTransaction(t *testing.T) {
	h := newHarness(t)
	commitUnknown := fmt.Errorf("%w: %w", pgtx.ErrCommitUnknown, io.ErrUnexpectedEOF)
	canceled := fmt.Errorf("%w: %w", context.Canceled, pgErr(pgerrcode.QueryCanceled))
	calls := []struct {
		call   call
		cancel bool // TraceCancel during the first attempt
	}{
		{call: call{label: "transfer", iso: pgtx.Serializable, attempts: []attempt{
			{err: pgErr(pgerrcode.SerializationFailure), retry: true, backoff: 5 * time.Millisecond}, {}}}},
		{call: call{label: "report", iso: pgtx.ReadCommitted, attempts: []attempt{
			{err: pgErr(pgerrcode.TooManyConnections), retry: true, backoff: 150 * time.Millisecond}, {}}}},
		{call: call{label: "slow", iso: pgtx.RepeatableRead, attempts: []attempt{{err: canceled}}}, cancel: true},
		{call: call{iso: pgtx.Serializable, attempts: []attempt{{err: commitUnknown}}}},
	}
	ctx, parent := h.tp.Tracer("test").Start(context.Background(), "parent")
	for _, c := range calls {
		run(ctx, h.tr, c.call, func(actx context.Context) {
			qctx, q := h.tp.Tracer("test").Start(actx, "pgx.query", trace.WithSpanKind(trace.SpanKindClient))
			if c.cancel {
				h.tr.TraceCancel(qctx, pgtx.TraceCancelData{PID: 7, Mode: pgtx.CancelModePool, Latency: 3 * time.Millisecond})
			}
			q.End()
		})
	}
	parent.End()

	// Spans: parent > pgtx.transaction[ label] (internal) > pgtx.attempt
	// (internal) > pgx.query.
	spans := h.spans.Ended()
	type want struct {
		name     string
		attrs    map[attribute.Key]attribute.Value
		status   codes.Code
		attempts []map[attribute.Key]attribute.Value
		astatus  []codes.Code
	}
	s := attribute.StringValue
	wants := []want{
		{name: "pgtx.transaction transfer", attrs: map[attribute.Key]attribute.Value{
			"db.system.name": s("postgresql"), "pgtx.isolation": s("SERIALIZABLE"), "pgtx.label": s("transfer"),
			"pgtx.attempt.count": attribute.IntValue(2)},
			attempts: []map[attribute.Key]attribute.Value{
				{"pgtx.attempt.number": attribute.IntValue(1), "pgtx.class": s("conflict"), "pgtx.retry": attribute.BoolValue(true),
					"pgtx.retry.backoff": attribute.Float64Value(0.005), "error.type": s("40001"), "db.response.status_code": s("40001")},
				{"pgtx.attempt.number": attribute.IntValue(2), "pgtx.class": s("none"), "pgtx.retry": attribute.BoolValue(false)},
			}, astatus: []codes.Code{codes.Error, codes.Unset}},
		{name: "pgtx.transaction report", attrs: map[attribute.Key]attribute.Value{
			"db.system.name": s("postgresql"), "pgtx.isolation": s("READ COMMITTED"), "pgtx.label": s("report"),
			"pgtx.attempt.count": attribute.IntValue(2)},
			attempts: []map[attribute.Key]attribute.Value{
				{"pgtx.attempt.number": attribute.IntValue(1), "pgtx.class": s("overload"), "pgtx.retry": attribute.BoolValue(true),
					"pgtx.retry.backoff": attribute.Float64Value(0.15), "error.type": s("53300"), "db.response.status_code": s("53300")},
				{"pgtx.attempt.number": attribute.IntValue(2), "pgtx.class": s("none"), "pgtx.retry": attribute.BoolValue(false)},
			}, astatus: []codes.Code{codes.Error, codes.Unset}},
		{name: "pgtx.transaction slow", status: codes.Error, attrs: map[attribute.Key]attribute.Value{
			"db.system.name": s("postgresql"), "pgtx.isolation": s("REPEATABLE READ"), "pgtx.label": s("slow"),
			"pgtx.attempt.count": attribute.IntValue(1), "pgtx.class": s("timeout"), "error.type": s("57014"), "db.response.status_code": s("57014")},
			attempts: []map[attribute.Key]attribute.Value{
				{"pgtx.attempt.number": attribute.IntValue(1), "pgtx.class": s("timeout"), "pgtx.retry": attribute.BoolValue(false),
					"error.type": s("57014"), "db.response.status_code": s("57014")},
			}, astatus: []codes.Code{codes.Error}},
		{name: "pgtx.transaction", status: codes.Error, attrs: map[attribute.Key]attribute.Value{
			"db.system.name": s("postgresql"), "pgtx.isolation": s("SERIALIZABLE"),
			"pgtx.attempt.count": attribute.IntValue(1), "pgtx.class": s("ambiguous"), "error.type": s("ambiguous"),
			"pgtx.commit_unknown": attribute.BoolValue(true)},
			attempts: []map[attribute.Key]attribute.Value{
				{"pgtx.attempt.number": attribute.IntValue(1), "pgtx.class": s("ambiguous"), "pgtx.retry": attribute.BoolValue(false),
					"error.type": s("ambiguous"), "pgtx.commit_unknown": attribute.BoolValue(true)},
			}, astatus: []codes.Code{codes.Error}},
	}
	if got, wantN := len(spans), 1+len(wants)+6+len(wants); got != wantN {
		t.Errorf("%d spans, want %d", got, wantN)
	}
	for _, w := range wants {
		tx := findSpan(t, spans, w.name)
		if tx.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("%s: parent %v, want the caller's span", w.name, tx.Parent().SpanID())
		}
		if tx.SpanKind() != trace.SpanKindInternal {
			t.Errorf("%s: kind %v, want internal", w.name, tx.SpanKind())
		}
		assertAttrs(t, w.name, attrMap(tx.Attributes()), w.attrs)
		assertExactKeys(t, w.name, attrMap(tx.Attributes()), w.attrs)
		if tx.Status().Code != w.status {
			t.Errorf("%s: status %v, want %v", w.name, tx.Status().Code, w.status)
		}
		var kids []sdktrace.ReadOnlySpan
		for _, sp := range spans {
			if sp.Parent().SpanID() == tx.SpanContext().SpanID() {
				kids = append(kids, sp)
			}
		}
		if len(kids) != len(w.attempts) {
			t.Fatalf("%s: %d children, want %d attempt spans", w.name, len(kids), len(w.attempts))
		}
		for i, a := range kids {
			what := fmt.Sprintf("%s attempt %d", w.name, i+1)
			if a.Name() != "pgtx.attempt" || a.SpanKind() != trace.SpanKindInternal {
				t.Errorf("%s: %s of kind %v, want an internal pgtx.attempt", what, a.Name(), a.SpanKind())
			}
			assertAttrs(t, what, attrMap(a.Attributes()), w.attempts[i])
			assertExactKeys(t, what, attrMap(a.Attributes()), w.attempts[i])
			if a.Status().Code != w.astatus[i] {
				t.Errorf("%s: status %v, want %v", what, a.Status().Code, w.astatus[i])
			}
			if i == 0 {
				var q sdktrace.ReadOnlySpan
				for _, sp := range spans {
					if sp.Name() == "pgx.query" && sp.Parent().SpanID() == a.SpanContext().SpanID() {
						q = sp
					}
				}
				if q == nil {
					t.Fatalf("%s: no pgx.query span under it", what)
				}
				if w.name == "pgtx.transaction slow" {
					ev := q.Events()
					if len(ev) != 1 || ev[0].Name != "pgtx.cancel" {
						t.Fatalf("query span events = %v, want one pgtx.cancel", ev)
					}
					wantEv := map[attribute.Key]attribute.Value{"pgtx.cancel.outcome": s("signalled"), "pgtx.cancel.mode": s("pool"),
						"pgtx.cancel.fell_back": attribute.BoolValue(false), "pgtx.cancel.latency": attribute.Float64Value(0.003),
						"pgtx.cancel.pid": attribute.Int64Value(7)}
					assertAttrs(t, "cancel event", attrMap(ev[0].Attributes), wantEv)
					assertExactKeys(t, "cancel event", attrMap(ev[0].Attributes), wantEv)
				}
			}
		}
	}

	// Metrics: every series of every instrument, exactly.
	rm := collect(t, h.reader)
	checkUnits(t, rm)
	wantSums := map[string]map[string]int64{
		"pgtx.transaction.count": {
			"pgtx.class=none,pgtx.label=transfer,pgtx.outcome=committed": 1,
			"pgtx.class=none,pgtx.label=report,pgtx.outcome=committed":   1,
			"pgtx.class=timeout,pgtx.label=slow,pgtx.outcome=failed":     1,
			"pgtx.class=ambiguous,pgtx.outcome=failed":                   1,
		},
		"pgtx.attempt.count": {
			"pgtx.class=conflict,pgtx.label=transfer": 1, "pgtx.class=none,pgtx.label=transfer": 1,
			"pgtx.class=overload,pgtx.label=report": 1, "pgtx.class=none,pgtx.label=report": 1,
			"pgtx.class=timeout,pgtx.label=slow": 1, "pgtx.class=ambiguous": 1,
		},
		"pgtx.retry.count":          {"pgtx.class=conflict,pgtx.label=transfer": 1, "pgtx.class=overload,pgtx.label=report": 1},
		"pgtx.commit_unknown.count": {"": 1},
		"pgtx.cancel.count":         {"pgtx.cancel.fell_back=false,pgtx.cancel.mode=pool,pgtx.cancel.outcome=signalled": 1},
	}
	for name, w := range wantSums {
		assertSeries(t, name, sumSeries(t, rm, name), w)
	}
	wantHists := map[string]map[string]histPoint{
		"db.client.operation.duration": {
			"db.system.name=postgresql,pgtx.label=transfer":                                            {1, 0.25},
			"db.system.name=postgresql,pgtx.label=report":                                              {1, 0.25},
			"db.response.status_code=57014,db.system.name=postgresql,error.type=57014,pgtx.label=slow": {1, 0.25},
			"db.system.name=postgresql,error.type=ambiguous":                                           {1, 0.25},
		},
		"pgtx.retry.backoff": {
			"pgtx.class=conflict,pgtx.label=transfer": {1, 0.005},
			"pgtx.class=overload,pgtx.label=report":   {1, 0.15},
		},
		"pgtx.cancel.latency": {"pgtx.cancel.fell_back=false,pgtx.cancel.mode=pool,pgtx.cancel.outcome=signalled": {1, 0.003}},
	}
	for name, w := range wantHists {
		assertSeries(t, name, histSeries(t, rm, name), w)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if _, ok := wantSums[m.Name]; ok {
				continue
			}
			if _, ok := wantHists[m.Name]; !ok {
				t.Errorf("unexpected metric %s", m.Name)
			}
		}
	}
	op := mustFindMetric(t, rm, "db.client.operation.duration").Data.(metricdata.Histogram[float64])
	for _, dp := range op.DataPoints {
		if fmt.Sprint(dp.Bounds) != fmt.Sprint(operationBuckets) {
			t.Errorf("db.client.operation.duration bounds = %v, want %v", dp.Bounds, operationBuckets)
		}
	}
}

// TestTraceAttemptEndContention: an attempt admitted by the contention
// manager's gate carries its wait and limit.
func TestTraceAttemptEndContention(t *testing.T) {
	h := newHarness(t)
	ctx := h.tr.TraceTransactionStart(context.Background(), pgtx.TraceTransactionStartData{Label: "hot", Isolation: pgtx.Serializable})
	actx := h.tr.TraceAttemptStart(ctx, pgtx.TraceAttemptStartData{Label: "hot", Isolation: pgtx.Serializable, Attempt: 1})
	h.tr.TraceAttemptEnd(actx, pgtx.TraceAttemptEndData{Label: "hot", Isolation: pgtx.Serializable, Attempt: 1,
		AdmissionWait: 20 * time.Millisecond, Limit: 4})
	h.tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Label: "hot", Isolation: pgtx.Serializable, Attempts: 1})
	a := findSpan(t, h.spans.Ended(), "pgtx.attempt")
	assertAttrs(t, "attempt", attrMap(a.Attributes()), map[attribute.Key]attribute.Value{
		"pgtx.contention.wait": attribute.Float64Value(0.02), "pgtx.contention.limit": attribute.IntValue(4)})
}

// TestTraceContention: a change of limit is counted, sets the label's
// gauge and is an event on the span in ctx.
func TestTraceContention(t *testing.T) {
	h := newHarness(t)
	ctx, span := h.tp.Tracer("test").Start(context.Background(), "attempt")
	h.tr.TraceContention(ctx, pgtx.TraceContentionData{Label: "hot", Limiting: true, Limit: 8, Previous: 0, ConflictRatio: 0.25})
	h.tr.TraceContention(ctx, pgtx.TraceContentionData{Label: "hot", Limiting: true, Limit: 4, Previous: 8, ConflictRatio: 0.3})
	h.tr.TraceContention(context.Background(), pgtx.TraceContentionData{Label: "cold", Limiting: false, Limit: 0, Previous: 2, ConflictRatio: 0.01})
	span.End()
	ev := findSpan(t, h.spans.Ended(), "attempt").Events()
	if len(ev) != 2 || ev[1].Name != "pgtx.contention.change" {
		t.Fatalf("events = %v, want two pgtx.contention.change", ev)
	}
	wantEv := map[attribute.Key]attribute.Value{"pgtx.label": attribute.StringValue("hot"), "pgtx.contention.limiting": attribute.BoolValue(true),
		"pgtx.contention.limit": attribute.IntValue(4), "pgtx.contention.previous_limit": attribute.IntValue(8),
		"pgtx.contention.conflict_ratio": attribute.Float64Value(0.3)}
	assertAttrs(t, "contention event", attrMap(ev[1].Attributes), wantEv)
	assertExactKeys(t, "contention event", attrMap(ev[1].Attributes), wantEv)
	rm := collect(t, h.reader)
	checkUnits(t, rm)
	assertSeries(t, "pgtx.contention.change.count", sumSeries(t, rm, "pgtx.contention.change.count"), map[string]int64{
		"pgtx.contention.limiting=true,pgtx.label=hot": 2, "pgtx.contention.limiting=false,pgtx.label=cold": 1})
	g := mustFindMetric(t, rm, "pgtx.contention.limit").Data.(metricdata.Gauge[int64])
	got := map[string]int64{}
	for _, dp := range g.DataPoints {
		got[setKey(dp.Attributes)] = dp.Value
	}
	assertSeries(t, "pgtx.contention.limit", got, map[string]int64{"pgtx.label=hot": 4, "pgtx.label=cold": 0})
}

// histPoint is a histogram point's count and sum.
type histPoint struct {
	count uint64
	sum   float64
}

// setKey renders an attribute set as "k=v,..." in key order.
func setKey(set attribute.Set) string {
	var parts []string
	for _, kv := range set.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	return strings.Join(parts, ",")
}

func sumSeries(t *testing.T, rm metricdata.ResourceMetrics, name string) map[string]int64 {
	t.Helper()
	m := mustFindMetric(t, rm, name)
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok || !sum.IsMonotonic {
		t.Fatalf("%s is a %T (monotonic %v), want an int64 counter", name, m.Data, sum.IsMonotonic)
	}
	got := map[string]int64{}
	for _, dp := range sum.DataPoints {
		got[setKey(dp.Attributes)] = dp.Value
	}
	return got
}

func histSeries(t *testing.T, rm metricdata.ResourceMetrics, name string) map[string]histPoint {
	t.Helper()
	m := mustFindMetric(t, rm, name)
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is a %T, want a float64 histogram", name, m.Data)
	}
	got := map[string]histPoint{}
	for _, dp := range h.DataPoints {
		got[setKey(dp.Attributes)] = histPoint{dp.Count, math.Round(dp.Sum*1e9) / 1e9}
	}
	return got
}

func assertSeries[V comparable](t *testing.T, name string, got, want map[string]V) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s{%s}: missing, want %v", name, k, w)
		} else if g != w {
			t.Errorf("%s{%s} = %v, want %v", name, k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s{%s} = %v: unexpected series", name, k, g)
		}
	}
}

func TestTraceCancel(t *testing.T) {
	tests := []struct {
		name     string
		data     pgtx.TraceCancelData
		span     string // "recording", "ended" or "none"
		wantMode string
		wantOut  string
	}{
		{
			name:     "pool signalled",
			data:     pgtx.TraceCancelData{PID: 41, Mode: pgtx.CancelModePool, Latency: 3 * time.Millisecond},
			span:     "recording",
			wantMode: "pool", wantOut: "signalled",
		},
		{
			name:     "pool fell back to protocol",
			data:     pgtx.TraceCancelData{PID: 42, Mode: pgtx.CancelModePool, FellBack: true, Latency: 20 * time.Millisecond},
			span:     "recording",
			wantMode: "pool", wantOut: "protocol",
		},
		{
			name:     "closed after the span ended",
			data:     pgtx.TraceCancelData{PID: 43, Mode: pgtx.CancelModeClose, Closed: true, Latency: time.Millisecond},
			span:     "ended",
			wantMode: "close", wantOut: "closed",
		},
		{
			name:     "no span",
			data:     pgtx.TraceCancelData{PID: 44, Mode: pgtx.CancelModePool, NotFound: true, Latency: 2 * time.Second},
			span:     "none",
			wantMode: "pool", wantOut: "not_found",
		},
		{
			name:     "pool fell back to close",
			data:     pgtx.TraceCancelData{PID: 45, Mode: pgtx.CancelModePool, Closed: true, FellBack: true, Latency: 2 * time.Second},
			span:     "recording",
			wantMode: "pool", wantOut: "closed",
		},
		{
			name:     "unknown mode",
			data:     pgtx.TraceCancelData{PID: 46, Mode: pgtx.CancelMode(9), Latency: time.Millisecond},
			span:     "recording",
			wantMode: "unknown", wantOut: "unknown",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			if ev := h.eventOn(t, tt.span, "statement", "pgtx.cancel", func(ctx context.Context) { h.tr.TraceCancel(ctx, tt.data) }); ev != nil {
				assertAttrs(t, "cancel event", attrMap(ev.Attributes), map[attribute.Key]attribute.Value{
					"pgtx.cancel.outcome":   attribute.StringValue(tt.wantOut),
					"pgtx.cancel.mode":      attribute.StringValue(tt.wantMode),
					"pgtx.cancel.fell_back": attribute.BoolValue(tt.data.FellBack),
					"pgtx.cancel.latency":   attribute.Float64Value(tt.data.Latency.Seconds()),
					"pgtx.cancel.pid":       attribute.Int64Value(int64(tt.data.PID)),
				})
			}

			rm := collect(t, h.reader)
			by := []attribute.KeyValue{
				attribute.String("pgtx.cancel.outcome", tt.wantOut),
				attribute.String("pgtx.cancel.mode", tt.wantMode),
				attribute.Bool("pgtx.cancel.fell_back", tt.data.FellBack),
			}
			if got := sumInt(t, rm, "pgtx.cancel.count", by...); got != 1 {
				t.Errorf("pgtx.cancel.count%v = %d, want 1", by, got)
			}
			if n, sum := histogram(t, rm, "pgtx.cancel.latency", by...); n != 1 || sum != tt.data.Latency.Seconds() {
				t.Errorf("pgtx.cancel.latency count, sum = %d, %g; want 1, %g", n, sum, tt.data.Latency.Seconds())
			}
		})
	}
}

func TestTraceBreakerStateChange(t *testing.T) {
	tests := []struct {
		name     string
		data     pgtx.TraceBreakerStateChangeData
		span     string // "recording", "ended" or "none"
		wantFrom string
		wantTo   string
	}{
		{
			name:     "opened during a call",
			data:     pgtx.TraceBreakerStateChangeData{Name: "replica", From: pgtx.BreakerClosed, To: pgtx.BreakerOpen, Reason: "5 consecutive failures", Calls: 9, Failures: 5, Slow: 2},
			span:     "recording",
			wantFrom: "closed", wantTo: "open",
		},
		{
			name:     "half-open without a span",
			data:     pgtx.TraceBreakerStateChangeData{Name: "replica", From: pgtx.BreakerOpen, To: pgtx.BreakerHalfOpen, Reason: "open for 5s"},
			span:     "none",
			wantFrom: "open", wantTo: "half-open",
		},
		{
			name:     "closed after the span ended",
			data:     pgtx.TraceBreakerStateChangeData{Name: "replica", From: pgtx.BreakerHalfOpen, To: pgtx.BreakerClosed, Reason: "half-open probes succeeded", Calls: 1},
			span:     "ended",
			wantFrom: "half-open", wantTo: "closed",
		},
		{
			name:     "no name, unknown state",
			data:     pgtx.TraceBreakerStateChangeData{From: pgtx.BreakerState(7), To: pgtx.BreakerOpen, Reason: "x"},
			span:     "recording",
			wantFrom: "unknown", wantTo: "open",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			if ev := h.eventOn(t, tt.span, "caller", "pgtx.breaker.state_change", func(ctx context.Context) { h.tr.TraceBreakerStateChange(ctx, tt.data) }); ev != nil {
				want := map[attribute.Key]attribute.Value{
					"pgtx.breaker.from":     attribute.StringValue(tt.wantFrom),
					"pgtx.breaker.to":       attribute.StringValue(tt.wantTo),
					"pgtx.breaker.reason":   attribute.StringValue(tt.data.Reason),
					"pgtx.breaker.calls":    attribute.Int64Value(tt.data.Calls),
					"pgtx.breaker.failures": attribute.Int64Value(tt.data.Failures),
					"pgtx.breaker.slow":     attribute.Int64Value(tt.data.Slow),
				}
				if tt.data.Name != "" {
					want["pgtx.breaker.name"] = attribute.StringValue(tt.data.Name)
				}
				assertAttrs(t, "breaker event", attrMap(ev.Attributes), want)
				assertExactKeys(t, "breaker event", attrMap(ev.Attributes), want)
			}

			rm := collect(t, h.reader)
			by := []attribute.KeyValue{
				attribute.String("pgtx.breaker.from", tt.wantFrom),
				attribute.String("pgtx.breaker.to", tt.wantTo),
			}
			if tt.data.Name != "" {
				by = append(by, attribute.String("pgtx.breaker.name", tt.data.Name))
			}
			if got := sumInt(t, rm, "pgtx.breaker.transition.count", by...); got != 1 {
				t.Errorf("pgtx.breaker.transition.count%v = %d, want 1", by, got)
			}
			m := mustFindMetric(t, rm, "pgtx.breaker.transition.count")
			for _, set := range pointSets(m) {
				if _, ok := set.Value("pgtx.breaker.name"); ok != (tt.data.Name != "") {
					t.Errorf("pgtx.breaker.transitions point %v: pgtx.breaker.name present %v, want %v", set.ToSlice(), ok, tt.data.Name != "")
				}
			}
			checkUnits(t, rm)
		})
	}
}

func TestWithAttributes(t *testing.T) {
	ns := attribute.String("db.namespace", "shop")
	h := newHarness(t, WithAttributes(ns), WithAttributes(attribute.String("server.address", "db1")))
	run(context.Background(), h.tr, call{label: "pay", iso: pgtx.Serializable, attempts: []attempt{
		{err: pgErr(pgerrcode.SerializationFailure), retry: true, backoff: time.Millisecond},
		{err: fmt.Errorf("%w: %w", pgtx.ErrRetryBudgetExhausted, pgErr(pgerrcode.ConnectionFailure)), budget: true},
	}}, nil)
	run(context.Background(), h.tr, call{iso: pgtx.Serializable, attempts: []attempt{
		{err: fmt.Errorf("%w: %w", pgtx.ErrCommitUnknown, io.EOF)},
	}}, nil)
	h.tr.TraceCancel(context.Background(), pgtx.TraceCancelData{Mode: pgtx.CancelModePool})
	h.tr.TraceBreakerStateChange(context.Background(), pgtx.TraceBreakerStateChangeData{Name: "replica", From: pgtx.BreakerClosed, To: pgtx.BreakerOpen})

	for _, s := range h.spans.Ended() {
		assertAttrs(t, s.Name(), attrMap(s.Attributes()), map[attribute.Key]attribute.Value{
			"db.namespace":   attribute.StringValue("shop"),
			"server.address": attribute.StringValue("db1"),
		})
	}
	rm := collect(t, h.reader)
	names := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			names[m.Name] = true
			for _, set := range pointSets(m) {
				for _, kv := range []attribute.KeyValue{ns, attribute.String("server.address", "db1")} {
					if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
						t.Errorf("%s point %v lacks %v", m.Name, set.ToSlice(), kv)
					}
				}
				if set.HasValue("db.system.name") != (m.Name == "db.client.operation.duration") {
					t.Errorf("%s point %v: db.system.name is only on db.client.operation.duration", m.Name, set.ToSlice())
				}
			}
		}
	}
	for _, name := range []string{"pgtx.transaction.count", "db.client.operation.duration", "pgtx.attempt.count", "pgtx.retry.count",
		"pgtx.retry.backoff", "pgtx.commit_unknown.count", "pgtx.retry_budget.refusal.count", "pgtx.cancel.count", "pgtx.cancel.latency",
		"pgtx.breaker.transition.count"} {
		if !names[name] {
			t.Errorf("metric %s not recorded", name)
		}
	}
}

// TestSampledOut: a call that is not sampled gets no span work, but its
// metrics are still recorded.
func TestSampledOut(t *testing.T) {
	h := newHarnessSampler(t, sdktrace.NeverSample())
	run(context.Background(), h.tr, call{iso: pgtx.Serializable, attempts: []attempt{
		{err: pgErr(pgerrcode.SerializationFailure), retry: true, backoff: time.Millisecond},
		{},
	}}, func(ctx context.Context) {
		if callSpan(ctx) != nil {
			t.Error("a sampled-out call carries a span to record on")
		}
	})
	if n := len(h.spans.Ended()); n != 0 {
		t.Errorf("%d spans ended, want 0", n)
	}
	rm := collect(t, h.reader)
	if got := sumInt(t, rm, "pgtx.attempt.count"); got != 2 {
		t.Errorf("pgtx.attempt.count = %d, want 2", got)
	}
	if got := sumInt(t, rm, "pgtx.transaction.count", attribute.String("pgtx.outcome", "committed")); got != 1 {
		t.Errorf("pgtx.transaction.count{committed} = %d, want 1", got)
	}
}

// TestForeignContext: the Tracer never touches a span it did not start, even
// when handed a context that did not come from TraceTransactionStart.
func TestForeignContext(t *testing.T) {
	h := newHarness(t)
	ctx, caller := h.tp.Tracer("test").Start(context.Background(), "caller")
	h.tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Attempt: 1, Err: pgErr("23505"), Class: pgtx.ClassPermanent})
	h.tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{Attempt: 1, Err: pgtx.ErrRetryBudgetExhausted, Class: pgtx.ClassOverload})
	h.tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Attempts: 1, Err: pgErr("23505"), Class: pgtx.ClassPermanent})
	if !caller.IsRecording() {
		t.Fatal("the caller's span was ended")
	}
	caller.End()
	s := findSpan(t, h.spans.Ended(), "caller")
	if len(s.Events()) != 0 || s.Status().Code != codes.Unset || len(s.Attributes()) != 0 {
		t.Errorf("caller's span was changed: events %v, status %v, attributes %v", s.Events(), s.Status(), s.Attributes())
	}
}

func TestTraceAttemptStartReturnsContext(t *testing.T) {
	h := newHarness(t)
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, 1)
	if got := h.tr.TraceAttemptStart(ctx, pgtx.TraceAttemptStartData{Attempt: 1}); got != ctx {
		t.Errorf("TraceAttemptStart returned a new context")
	}
}

// TestLabelOverflow: past maxLabels distinct labels, metrics share one
// series while spans keep the real label.
func TestLabelOverflow(t *testing.T) {
	h := newHarness(t)
	const extra = 5
	for i := range maxLabels + extra {
		run(context.Background(), h.tr, call{label: "l" + strconv.Itoa(i), iso: pgtx.ReadCommitted, attempts: []attempt{{}}}, nil)
	}
	rm := collect(t, h.reader)
	if got := sumInt(t, rm, "pgtx.transaction.count", attribute.String("pgtx.label", otherLabel)); got != extra {
		t.Errorf("pgtx.transaction.count{label=%s} = %d, want %d", otherLabel, got, extra)
	}
	if got := sumInt(t, rm, "pgtx.transaction.count", attribute.String("pgtx.label", "l0")); got != 1 {
		t.Errorf("pgtx.transaction.count{label=l0} = %d, want 1", got)
	}
	last := "l" + strconv.Itoa(maxLabels+extra-1)
	s := findSpan(t, h.spans.Ended(), "pgtx.transaction "+last)
	if v, _ := attrMap(s.Attributes())["pgtx.label"]; v.AsString() != last {
		t.Errorf("overflow span label = %q, want %q", v.AsString(), last)
	}
}

// TestConcurrent runs calls from many goroutines (for the race detector).
func TestConcurrent(t *testing.T) {
	h := newHarness(t)
	const workers, calls = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				run(context.Background(), h.tr, call{label: "w" + strconv.Itoa((w+i)%4), iso: pgtx.Serializable, attempts: []attempt{
					{err: pgErr(pgerrcode.SerializationFailure), retry: true, backoff: time.Millisecond},
					{},
				}}, nil)
				h.tr.TraceCancel(context.Background(), pgtx.TraceCancelData{Mode: pgtx.CancelModePool})
				h.tr.TraceBreakerStateChange(context.Background(), pgtx.TraceBreakerStateChangeData{From: pgtx.BreakerClosed, To: pgtx.BreakerOpen})
			}
		})
	}
	wg.Wait()
	rm := collect(t, h.reader)
	if got := sumInt(t, rm, "pgtx.transaction.count"); got != workers*calls {
		t.Errorf("pgtx.transaction.count = %d, want %d", got, workers*calls)
	}
	if got := sumInt(t, rm, "pgtx.retry.count", attribute.String("pgtx.class", "conflict")); got != workers*calls {
		t.Errorf("pgtx.retry.count = %d, want %d", got, workers*calls)
	}
	if got := countSpans(h.spans.Ended(), "pgtx.transaction"); got != workers*calls {
		t.Errorf("%d spans, want %d", got, workers*calls)
	}
}

// failingMeter refuses to create one instrument.
type failingMeter struct {
	noop.Meter
	fail string
}

func (m failingMeter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	if name == m.fail {
		return nil, errors.New("refused " + name)
	}
	return m.Meter.Float64Histogram(name, opts...)
}

func (m failingMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	if name == m.fail {
		return nil, errors.New("refused " + name)
	}
	return m.Meter.Int64Counter(name, opts...)
}

type failingProvider struct {
	noop.MeterProvider
	fail string
}

func (p failingProvider) Meter(string, ...metric.MeterOption) metric.Meter {
	return failingMeter{fail: p.fail}
}

// captureOtelErrors sends the errors given to otel.Handle to the returned
// slice until the test ends.
func captureOtelErrors(t *testing.T) *[]error {
	t.Helper()
	var mu sync.Mutex
	var errs []error
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}))
	t.Cleanup(func() { otel.SetErrorHandler(prev) })
	return &errs
}

// TestNewTracerInstrumentError: an instrument that cannot be created is
// reported to otel.Handle, and the Tracer still traces, without metrics.
func TestNewTracerInstrumentError(t *testing.T) {
	for _, name := range []string{"pgtx.retry.count", "pgtx.retry.backoff", "pgtx.cancel.latency"} {
		t.Run(name, func(t *testing.T) {
			errs := captureOtelErrors(t)
			sr := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			tr := NewTracer(WithTracerProvider(tp), WithMeterProvider(failingProvider{fail: name}))
			if len(*errs) != 1 || !strings.Contains((*errs)[0].Error(), "refused "+name) {
				t.Errorf("otel.Handle got %v, want one error naming %s", *errs, name)
			}
			run(context.Background(), tr, call{iso: pgtx.ReadCommitted, attempts: []attempt{
				{err: pgErr(pgerrcode.SerializationFailure), retry: true, backoff: time.Millisecond},
				{},
			}}, nil)
			tr.TraceCancel(context.Background(), pgtx.TraceCancelData{Mode: pgtx.CancelModePool})
			findSpan(t, sr.Ended(), "pgtx.transaction")
		})
	}
}

// TestNewPoolTracerInstrumentError: the same for a PoolTracer, which then
// records nothing.
func TestNewPoolTracerInstrumentError(t *testing.T) {
	errs := captureOtelErrors(t)
	pt := NewPoolTracer("main", WithMeterProvider(failingProvider{fail: "db.client.connection.wait_time"}))
	if len(*errs) != 1 || !strings.Contains((*errs)[0].Error(), "refused db.client.connection.wait_time") {
		t.Errorf("otel.Handle got %v, want one error naming db.client.connection.wait_time", *errs)
	}
	ctx := pt.TraceAcquireStart(context.Background(), nil, pgxpool.TraceAcquireStartData{})
	pt.TraceAcquireEnd(ctx, nil, pgxpool.TraceAcquireEndData{Conn: &pgx.Conn{}})
}

// TestGlobalProviders: without options, NewTracer uses the global providers.
func TestGlobalProviders(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	prevTP, prevMP := otel.GetTracerProvider(), otel.GetMeterProvider()
	otel.SetTracerProvider(tp)
	otel.SetMeterProvider(mp)
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetMeterProvider(prevMP)
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	tr := NewTracer()
	run(context.Background(), tr, call{iso: pgtx.ReadCommitted, attempts: []attempt{{}}}, nil)
	s := findSpan(t, sr.Ended(), "pgtx.transaction")
	if s.InstrumentationScope().Name != ScopeName {
		t.Errorf("scope = %q, want %q", s.InstrumentationScope().Name, ScopeName)
	}
	if got := sumInt(t, collect(t, reader), "pgtx.transaction.count"); got != 1 {
		t.Errorf("pgtx.transaction.count = %d, want 1", got)
	}
}

func BenchmarkTransaction(b *testing.B) {
	for _, sampled := range []bool{true, false} {
		b.Run("sampled="+strconv.FormatBool(sampled), func(b *testing.B) {
			sampler := sdktrace.NeverSample()
			if sampled {
				sampler = sdktrace.AlwaysSample()
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			tr := NewTracer(WithTracerProvider(tp), WithMeterProvider(mp))
			c := call{label: "transfer", iso: pgtx.Serializable, attempts: []attempt{
				{err: pgErr(pgerrcode.SerializationFailure), retry: true, backoff: time.Millisecond},
				{},
			}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				run(ctx, tr, c, nil)
			}
		})
	}
}

// Helpers.

func findSpan(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	var names []string
	for _, s := range spans {
		names = append(names, s.Name())
	}
	t.Fatalf("no span %q among %v", name, names)
	return nil
}

func countSpans(spans []sdktrace.ReadOnlySpan, prefix string) int {
	n := 0
	for _, s := range spans {
		if strings.HasPrefix(s.Name(), prefix) {
			n++
		}
	}
	return n
}

func attrMap(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func assertAttrs(t *testing.T, what string, got, want map[attribute.Key]attribute.Value) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: no attribute %s (want %s)", what, k, w.String())
			continue
		}
		if g != w {
			t.Errorf("%s: %s = %s (%s), want %s (%s)", what, k, g.String(), g.Type(), w.String(), w.Type())
		}
	}
}

func assertExactKeys(t *testing.T, what string, got, want map[attribute.Key]attribute.Value) {
	t.Helper()
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected attribute %s = %s", what, k, g.String())
		}
	}
}

func collect(t *testing.T, r *sdkmetric.ManualReader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return rm
}

func findMetric(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

func matches(set attribute.Set, by []attribute.KeyValue) bool {
	for _, kv := range by {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// sumInt adds up the points of counter name whose attributes include by.
func sumInt(t *testing.T, rm metricdata.ResourceMetrics, name string, by ...attribute.KeyValue) int64 {
	t.Helper()
	m, ok := findMetric(rm, name)
	if !ok {
		return 0
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, want an int64 sum", name, m.Data)
	}
	if !sum.IsMonotonic {
		t.Errorf("%s is not monotonic", name)
	}
	var n int64
	for _, dp := range sum.DataPoints {
		if matches(dp.Attributes, by) {
			n += dp.Value
		}
	}
	return n
}

// histogram returns the count and sum of the points of histogram name whose
// attributes include by.
func histogram(t *testing.T, rm metricdata.ResourceMetrics, name string, by ...attribute.KeyValue) (uint64, float64) {
	t.Helper()
	m, ok := findMetric(rm, name)
	if !ok {
		return 0, 0
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is a %T, want a float64 histogram", name, m.Data)
	}
	var n uint64
	var sum float64
	for _, dp := range h.DataPoints {
		if matches(dp.Attributes, by) {
			n += dp.Count
			sum += dp.Sum
		}
	}
	return n, sum
}

func pointSets(m metricdata.Metrics) []attribute.Set {
	var sets []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	}
	return sets
}

// checkUnits checks the unit of every recorded instrument.
func checkUnits(t *testing.T, rm metricdata.ResourceMetrics) {
	t.Helper()
	want := map[string]string{
		"pgtx.transaction.count": "{transaction}", "db.client.operation.duration": "s",
		"pgtx.attempt.count": "{attempt}", "pgtx.retry.count": "{retry}", "pgtx.retry.backoff": "s",
		"pgtx.commit_unknown.count": "{transaction}", "pgtx.retry_budget.refusal.count": "{retry}",
		"pgtx.cancel.count": "{cancel}", "pgtx.cancel.latency": "s",
		"pgtx.breaker.transition.count": "{transition}",
		"pgtx.contention.limit":         "{attempt}", "pgtx.contention.change.count": "{change}",
		"pgtx.commit_lost.count": "{transaction}", "pgtx.replication.asynchronous": "1",
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ScopeName {
			t.Errorf("scope = %q, want %q", sm.Scope.Name, ScopeName)
		}
		for _, m := range sm.Metrics {
			if w, ok := want[m.Name]; !ok {
				t.Errorf("unexpected metric %s", m.Name)
			} else if m.Unit != w {
				t.Errorf("%s unit = %q, want %q", m.Name, m.Unit, w)
			}
		}
	}
}
