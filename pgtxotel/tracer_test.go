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
	"github.com/jackc/pgx/v5/pgconn"
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

func newHarness(t *testing.T, opts ...Option) *harness {
	t.Helper()
	return newHarnessSampler(t, sdktrace.AlwaysSample(), opts...)
}

func newHarnessSampler(t *testing.T, sampler sdktrace.Sampler, opts ...Option) *harness {
	t.Helper()
	h := &harness{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans), sdktrace.WithSampler(sampler))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	t.Cleanup(func() {
		_ = h.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	tr, err := New(append([]Option{WithTracerProvider(h.tp), WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.tr = tr
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

// codeOf returns the SQLSTATE of the *pgconn.PgError in err, or "".
func codeOf(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

func TestTransaction(t *testing.T) {
	commitUnknown := fmt.Errorf("%w: %w", pgtx.ErrCommitUnknown, io.ErrUnexpectedEOF)
	budgetSpent := fmt.Errorf("%w: %w", pgtx.ErrRetryBudgetExhausted, pgErr(pgerrcode.TooManyConnections))
	backoffEnded := fmt.Errorf("%w: %w", context.DeadlineExceeded, pgErr(pgerrcode.SerializationFailure))

	tests := []struct {
		name string
		call call

		wantName       string
		wantStatus     codes.Code
		wantErrorType  string // "" for none
		wantStatusCode string // db.response.status_code on the span
		wantCommitUnk  bool
		wantBudget     bool
		wantAttempts   map[string]int64 // pgtx.attempts by class
		wantRetries    map[string]int64 // pgtx.retries by class
		wantBackoffN   uint64
		wantBackoffSum float64
		wantOutcome    string
		wantClass      string
	}{
		{
			name:         "committed first try",
			call:         call{iso: pgtx.ReadCommitted, attempts: []attempt{{}}},
			wantName:     "pgtx.transaction",
			wantStatus:   codes.Unset,
			wantAttempts: map[string]int64{"none": 1},
			wantOutcome:  "committed",
			wantClass:    "none",
		},
		{
			name: "conflict then commit",
			call: call{label: "transfer", iso: pgtx.Serializable, attempts: []attempt{
				{err: pgErr(pgerrcode.SerializationFailure), retry: true, backoff: 5 * time.Millisecond},
				{},
			}},
			wantName:       "pgtx.transaction transfer",
			wantStatus:     codes.Unset,
			wantAttempts:   map[string]int64{"conflict": 1, "none": 1},
			wantRetries:    map[string]int64{"conflict": 1},
			wantBackoffN:   1,
			wantBackoffSum: 0.005,
			wantOutcome:    "committed",
			wantClass:      "none",
		},
		{
			name: "conflicts then permanent error",
			call: call{label: "book", iso: pgtx.RepeatableRead, attempts: []attempt{
				{err: pgErr(pgerrcode.DeadlockDetected), retry: true, backoff: 2 * time.Millisecond},
				{err: pgErr(pgerrcode.SerializationFailure), retry: true, backoff: 4 * time.Millisecond},
				{err: pgErr("23505")},
			}},
			wantName:       "pgtx.transaction book",
			wantStatus:     codes.Error,
			wantErrorType:  "permanent",
			wantStatusCode: "23505",
			wantAttempts:   map[string]int64{"conflict": 2, "permanent": 1},
			wantRetries:    map[string]int64{"conflict": 2},
			wantBackoffN:   2,
			wantBackoffSum: 0.006,
			wantOutcome:    "failed",
			wantClass:      "permanent",
		},
		{
			name:          "ambiguous commit",
			call:          call{iso: pgtx.Serializable, attempts: []attempt{{err: commitUnknown}}},
			wantName:      "pgtx.transaction",
			wantStatus:    codes.Error,
			wantErrorType: "ambiguous",
			wantCommitUnk: true,
			wantAttempts:  map[string]int64{"ambiguous": 1},
			wantOutcome:   "failed",
			wantClass:     "ambiguous",
		},
		{
			name: "retry budget exhausted",
			call: call{label: "report", iso: pgtx.ReadCommitted, attempts: []attempt{
				{err: pgErr(pgerrcode.TooManyConnections), retry: true, backoff: 150 * time.Millisecond},
				{err: budgetSpent, budget: true},
			}},
			wantName:       "pgtx.transaction report",
			wantStatus:     codes.Error,
			wantErrorType:  "overload",
			wantStatusCode: pgerrcode.TooManyConnections,
			wantBudget:     true,
			wantAttempts:   map[string]int64{"overload": 2},
			wantRetries:    map[string]int64{"overload": 1},
			wantBackoffN:   1,
			wantBackoffSum: 0.15,
			wantOutcome:    "failed",
			wantClass:      "overload",
		},
		{
			name: "context ended during backoff",
			call: call{iso: pgtx.Serializable, attempts: []attempt{
				{err: pgErr(pgerrcode.SerializationFailure), retry: true, backoff: 50 * time.Millisecond},
			}, endErr: backoffEnded, endClass: pgtx.ClassTimeout, override: true},
			wantName:       "pgtx.transaction",
			wantStatus:     codes.Error,
			wantErrorType:  "timeout",
			wantStatusCode: pgerrcode.SerializationFailure,
			wantAttempts:   map[string]int64{"conflict": 1},
			wantRetries:    map[string]int64{"conflict": 1},
			wantBackoffN:   1,
			wantBackoffSum: 0.05,
			wantOutcome:    "failed",
			wantClass:      "timeout",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			ctx, parent := h.tp.Tracer("test").Start(context.Background(), "parent")
			var child trace.Span
			run(ctx, h.tr, tt.call, func(ctx context.Context) {
				_, child = h.tp.Tracer("test").Start(ctx, "pgx.query")
				child.End()
			})
			parent.End()

			got := findSpan(t, h.spans.Ended(), tt.wantName)
			if got.Parent().SpanID() != parent.SpanContext().SpanID() || got.SpanContext().TraceID() != parent.SpanContext().TraceID() {
				t.Errorf("span parent = %v, want the test's span %v", got.Parent().SpanID(), parent.SpanContext().SpanID())
			}
			if c := findSpan(t, h.spans.Ended(), "pgx.query"); c.Parent().SpanID() != got.SpanContext().SpanID() {
				t.Errorf("fn's span parent = %v, want the transaction span %v", c.Parent().SpanID(), got.SpanContext().SpanID())
			}
			if n := countSpans(h.spans.Ended(), "pgtx.transaction"); n != 1 {
				t.Errorf("%d pgtx spans, want 1", n)
			}
			if got.SpanKind() != trace.SpanKindClient {
				t.Errorf("kind = %v, want client", got.SpanKind())
			}

			_, err := tt.call.result()
			attrs := attrMap(got.Attributes())
			want := map[attribute.Key]attribute.Value{
				"db.system.name": attribute.StringValue("postgresql"),
				"pgtx.isolation": attribute.StringValue(tt.call.iso.String()),
				"pgtx.attempts":  attribute.IntValue(len(tt.call.attempts)),
			}
			if tt.call.label != "" {
				want["pgtx.label"] = attribute.StringValue(tt.call.label)
			}
			if tt.wantErrorType != "" {
				want["error.type"] = attribute.StringValue(tt.wantErrorType)
			}
			if tt.wantStatusCode != "" {
				want["db.response.status_code"] = attribute.StringValue(tt.wantStatusCode)
			}
			if tt.wantCommitUnk {
				want["pgtx.commit_unknown"] = attribute.BoolValue(true)
			}
			if tt.wantBudget {
				want["pgtx.retry_budget_exhausted"] = attribute.BoolValue(true)
			}
			assertAttrs(t, "span", attrs, want)

			if got.Status().Code != tt.wantStatus {
				t.Errorf("status = %v, want %v", got.Status().Code, tt.wantStatus)
			}
			if tt.wantStatus == codes.Error && got.Status().Description != err.Error() {
				t.Errorf("status description = %q, want %q", got.Status().Description, err.Error())
			}

			// Events: one per attempt, the budget event before the attempt
			// it refused, and the recorded error last.
			var wantEvents []string
			for _, a := range tt.call.attempts {
				if a.budget {
					wantEvents = append(wantEvents, "pgtx.retry_budget_exhausted")
				}
				wantEvents = append(wantEvents, "pgtx.attempt")
			}
			if err != nil {
				wantEvents = append(wantEvents, "exception")
			}
			var gotEvents []string
			for _, e := range got.Events() {
				gotEvents = append(gotEvents, e.Name)
			}
			if strings.Join(gotEvents, ",") != strings.Join(wantEvents, ",") {
				t.Fatalf("events = %v, want %v", gotEvents, wantEvents)
			}
			n := 0
			for _, e := range got.Events() {
				switch e.Name {
				case "pgtx.attempt":
					a := tt.call.attempts[n]
					n++
					wantEv := map[attribute.Key]attribute.Value{
						"pgtx.attempt":     attribute.IntValue(n),
						"pgtx.class":       attribute.StringValue(pgtx.Classify(a.err).String()),
						"pgtx.retry":       attribute.BoolValue(a.retry),
						"pgtx.backoff_ms":  attribute.Float64Value(float64(a.backoff) / 1e6),
						"pgtx.duration_ms": attribute.Float64Value(float64(n)),
					}
					if a.err != nil {
						wantEv["error.type"] = attribute.StringValue(pgtx.Classify(a.err).String())
					}
					if code := codeOf(a.err); code != "" {
						wantEv["db.response.status_code"] = attribute.StringValue(code)
					}
					if errors.Is(a.err, pgtx.ErrCommitUnknown) {
						wantEv["pgtx.commit_unknown"] = attribute.BoolValue(true)
					}
					if a.budget {
						wantEv["pgtx.retry_budget_exhausted"] = attribute.BoolValue(true)
					}
					assertAttrs(t, "attempt "+strconv.Itoa(n), attrMap(e.Attributes), wantEv)
					assertExactKeys(t, "attempt "+strconv.Itoa(n), attrMap(e.Attributes), wantEv)
				case "pgtx.retry_budget_exhausted":
					a := tt.call.attempts[n]
					assertAttrs(t, "budget event", attrMap(e.Attributes), map[attribute.Key]attribute.Value{
						"pgtx.attempt":            attribute.IntValue(n + 1),
						"pgtx.class":              attribute.StringValue(pgtx.Classify(a.err).String()),
						"db.response.status_code": attribute.StringValue(codeOf(a.err)),
					})
				}
			}

			// Metrics.
			rm := collect(t, h.reader)
			for class, want := range tt.wantAttempts {
				if got := sumInt(t, rm, "pgtx.attempts", attribute.String("pgtx.class", class)); got != want {
					t.Errorf("pgtx.attempts{class=%s} = %d, want %d", class, got, want)
				}
			}
			if got, want := sumInt(t, rm, "pgtx.attempts"), int64(len(tt.call.attempts)); got != want {
				t.Errorf("pgtx.attempts = %d, want %d", got, want)
			}
			var retries int64
			for class, want := range tt.wantRetries {
				retries += want
				if got := sumInt(t, rm, "pgtx.retries", attribute.String("pgtx.class", class)); got != want {
					t.Errorf("pgtx.retries{class=%s} = %d, want %d", class, got, want)
				}
			}
			if got := sumInt(t, rm, "pgtx.retries"); got != retries {
				t.Errorf("pgtx.retries = %d, want %d", got, retries)
			}
			if n, sum := histogram(t, rm, "pgtx.backoff"); n != tt.wantBackoffN || math.Abs(sum-tt.wantBackoffSum) > 1e-9 {
				t.Errorf("pgtx.backoff count, sum = %d, %g; want %d, %g", n, sum, tt.wantBackoffN, tt.wantBackoffSum)
			}
			var wantCU, wantBudget int64
			if tt.wantCommitUnk {
				wantCU = 1
			}
			if tt.wantBudget {
				wantBudget = 1
			}
			if got := sumInt(t, rm, "pgtx.commit_unknown"); got != wantCU {
				t.Errorf("pgtx.commit_unknown = %d, want %d", got, wantCU)
			}
			if got := sumInt(t, rm, "pgtx.retry_budget.exhausted"); got != wantBudget {
				t.Errorf("pgtx.retry_budget.exhausted = %d, want %d", got, wantBudget)
			}
			byCall := []attribute.KeyValue{attribute.String("pgtx.outcome", tt.wantOutcome), attribute.String("pgtx.class", tt.wantClass)}
			if tt.call.label != "" {
				byCall = append(byCall, attribute.String("pgtx.label", tt.call.label))
			}
			if got := sumInt(t, rm, "pgtx.transactions", byCall...); got != 1 {
				t.Errorf("pgtx.transactions%v = %d, want 1", byCall, got)
			}
			if got := sumInt(t, rm, "pgtx.transactions"); got != 1 {
				t.Errorf("pgtx.transactions = %d, want 1", got)
			}
			if n, sum := histogram(t, rm, "pgtx.transaction.duration", byCall...); n != 1 || sum != 0.25 {
				t.Errorf("pgtx.transaction.duration count, sum = %d, %g; want 1, 0.25", n, sum)
			}
			checkUnits(t, rm)
		})
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
			ctx := context.Background()
			var span trace.Span
			if tt.span != "none" {
				ctx, span = h.tp.Tracer("test").Start(ctx, "statement")
			}
			if tt.span == "ended" {
				span.End()
			}
			h.tr.TraceCancel(ctx, tt.data)
			if tt.span == "recording" {
				span.End()
			}

			var events []sdktrace.Event
			for _, s := range h.spans.Ended() {
				events = append(events, s.Events()...)
			}
			if tt.span != "recording" {
				if len(events) != 0 {
					t.Errorf("events = %v, want none", events)
				}
			} else {
				if len(events) != 1 || events[0].Name != "pgtx.cancel" {
					t.Fatalf("events = %v, want one pgtx.cancel", events)
				}
				assertAttrs(t, "cancel event", attrMap(events[0].Attributes), map[attribute.Key]attribute.Value{
					"pgtx.cancel.outcome":    attribute.StringValue(tt.wantOut),
					"pgtx.cancel.mode":       attribute.StringValue(tt.wantMode),
					"pgtx.cancel.fell_back":  attribute.BoolValue(tt.data.FellBack),
					"pgtx.cancel.latency_ms": attribute.Float64Value(float64(tt.data.Latency) / 1e6),
					"pgtx.cancel.pid":        attribute.Int64Value(int64(tt.data.PID)),
				})
			}

			rm := collect(t, h.reader)
			by := []attribute.KeyValue{
				attribute.String("pgtx.cancel.outcome", tt.wantOut),
				attribute.String("pgtx.cancel.mode", tt.wantMode),
				attribute.Bool("pgtx.cancel.fell_back", tt.data.FellBack),
			}
			if got := sumInt(t, rm, "pgtx.cancels", by...); got != 1 {
				t.Errorf("pgtx.cancels%v = %d, want 1", by, got)
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
			ctx := context.Background()
			var span trace.Span
			if tt.span != "none" {
				ctx, span = h.tp.Tracer("test").Start(ctx, "caller")
			}
			if tt.span == "ended" {
				span.End()
			}
			h.tr.TraceBreakerStateChange(ctx, tt.data)
			if tt.span == "recording" {
				span.End()
			}

			var events []sdktrace.Event
			for _, s := range h.spans.Ended() {
				events = append(events, s.Events()...)
			}
			if tt.span != "recording" {
				if len(events) != 0 {
					t.Errorf("events = %v, want none", events)
				}
			} else {
				if len(events) != 1 || events[0].Name != "pgtx.breaker.state_change" {
					t.Fatalf("events = %v, want one pgtx.breaker.state_change", events)
				}
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
				assertAttrs(t, "breaker event", attrMap(events[0].Attributes), want)
				assertExactKeys(t, "breaker event", attrMap(events[0].Attributes), want)
			}

			rm := collect(t, h.reader)
			by := []attribute.KeyValue{
				attribute.String("pgtx.breaker.from", tt.wantFrom),
				attribute.String("pgtx.breaker.to", tt.wantTo),
			}
			if tt.data.Name != "" {
				by = append(by, attribute.String("pgtx.breaker.name", tt.data.Name))
			}
			if got := sumInt(t, rm, "pgtx.breaker.transitions", by...); got != 1 {
				t.Errorf("pgtx.breaker.transitions%v = %d, want 1", by, got)
			}
			m := mustFindMetric(t, rm, "pgtx.breaker.transitions")
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
				if set.HasValue("db.system.name") {
					t.Errorf("%s point %v: db.system.name is a span attribute only", m.Name, set.ToSlice())
				}
			}
		}
	}
	for _, name := range []string{"pgtx.transactions", "pgtx.transaction.duration", "pgtx.attempts", "pgtx.retries",
		"pgtx.backoff", "pgtx.commit_unknown", "pgtx.retry_budget.exhausted", "pgtx.cancels", "pgtx.cancel.latency",
		"pgtx.breaker.transitions"} {
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
	if got := sumInt(t, rm, "pgtx.attempts"); got != 2 {
		t.Errorf("pgtx.attempts = %d, want 2", got)
	}
	if got := sumInt(t, rm, "pgtx.transactions", attribute.String("pgtx.outcome", "committed")); got != 1 {
		t.Errorf("pgtx.transactions{committed} = %d, want 1", got)
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
	if got := sumInt(t, rm, "pgtx.transactions", attribute.String("pgtx.label", otherLabel)); got != extra {
		t.Errorf("pgtx.transactions{label=%s} = %d, want %d", otherLabel, got, extra)
	}
	if got := sumInt(t, rm, "pgtx.transactions", attribute.String("pgtx.label", "l0")); got != 1 {
		t.Errorf("pgtx.transactions{label=l0} = %d, want 1", got)
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
	if got := sumInt(t, rm, "pgtx.transactions"); got != workers*calls {
		t.Errorf("pgtx.transactions = %d, want %d", got, workers*calls)
	}
	if got := sumInt(t, rm, "pgtx.retries", attribute.String("pgtx.class", "conflict")); got != workers*calls {
		t.Errorf("pgtx.retries = %d, want %d", got, workers*calls)
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

func TestNewInstrumentError(t *testing.T) {
	for _, name := range []string{"pgtx.retries", "pgtx.backoff", "pgtx.cancel.latency"} {
		t.Run(name, func(t *testing.T) {
			tr, err := New(WithMeterProvider(failingProvider{fail: name}))
			if err == nil || !strings.Contains(err.Error(), "refused "+name) {
				t.Errorf("New error = %v, want it to name %s", err, name)
			}
			if tr != nil {
				t.Errorf("New returned a Tracer with an error")
			}
		})
	}
}

// TestGlobalProviders: without options, New uses the global providers.
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
	tr, err := New()
	if err != nil {
		t.Fatal(err)
	}
	run(context.Background(), tr, call{iso: pgtx.ReadCommitted, attempts: []attempt{{}}}, nil)
	s := findSpan(t, sr.Ended(), "pgtx.transaction")
	if s.InstrumentationScope().Name != ScopeName {
		t.Errorf("scope = %q, want %q", s.InstrumentationScope().Name, ScopeName)
	}
	if got := sumInt(t, collect(t, reader), "pgtx.transactions"); got != 1 {
		t.Errorf("pgtx.transactions = %d, want 1", got)
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
			tr, err := New(WithTracerProvider(tp), WithMeterProvider(mp))
			if err != nil {
				b.Fatal(err)
			}
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
		"pgtx.transactions": "{transaction}", "pgtx.transaction.duration": "s",
		"pgtx.attempts": "{attempt}", "pgtx.retries": "{retry}", "pgtx.backoff": "s",
		"pgtx.commit_unknown": "{transaction}", "pgtx.retry_budget.exhausted": "{retry}",
		"pgtx.cancels": "{cancel}", "pgtx.cancel.latency": "s",
		"pgtx.breaker.transitions": "{transition}",
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
