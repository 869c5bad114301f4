package integration

import (
	"context"
	"testing"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TestOtelpgx runs pgtxotel beside otelpgx on one pool, against a real
// server: otelpgx's client spans of the statements fn runs nest under
// pgtx's attempt span, itself under the transaction span, of kind
// internal; and the PoolTracer, combined with otelpgx by multitracer,
// records the connection's wait and use.
func TestOtelpgx(t *testing.T) {
	ctx := testCtx(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	tr := pgtxotel.NewTracer(pgtxotel.WithTracerProvider(tp), pgtxotel.WithMeterProvider(mp))
	pt := pgtxotel.NewPoolTracer("main", pgtxotel.WithMeterProvider(mp))
	pool := newPool(t, newDB(t), func(cfg *pgtx.Config) {
		cfg.Tracer = tr
		cfg.ConnConfig.Tracer = multitracer.New(
			otelpgx.NewTracer(otelpgx.WithTracerProvider(tp), otelpgx.WithMeterProvider(mp)), pt)
	})

	ctx, caller := tp.Tracer("test").Start(ctx, "caller")
	err := pgtx.TransactionWithOptions(ctx, pool, pgtx.ReadCommitted, pgtx.Options{Label: "probe"},
		func(ctx context.Context, tx pgx.Tx) error {
			var n int
			return tx.QueryRow(ctx, "select 1").Scan(&n)
		})
	caller.End()
	if err != nil {
		t.Fatalf("Transaction: %v", err)
	}

	spans := exp.GetSpans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	var txSpan, attempt *tracetest.SpanStub
	for i := range spans {
		switch spans[i].Name {
		case "pgtx.transaction probe":
			txSpan = &spans[i]
		case "pgtx.attempt":
			attempt = &spans[i]
		}
	}
	if txSpan == nil || attempt == nil {
		t.Fatalf("no pgtx.transaction probe or pgtx.attempt span among %v", names(spans))
	}
	if txSpan.SpanKind != trace.SpanKindInternal || attempt.SpanKind != trace.SpanKindInternal {
		t.Errorf("kinds: transaction %v, attempt %v; want internal", txSpan.SpanKind, attempt.SpanKind)
	}
	if txSpan.Parent.SpanID() != caller.SpanContext().SpanID() {
		t.Errorf("transaction span's parent is not the caller's span")
	}
	if attempt.Parent.SpanID() != txSpan.SpanContext.SpanID() {
		t.Errorf("attempt span's parent is not the transaction span")
	}
	// otelpgx's query spans (kind client, from otelpgx's scope): the
	// statement fn ran, and BEGIN and COMMIT, all under the attempt.
	var queries int
	for _, s := range spans {
		if s.InstrumentationScope.Name != "github.com/exaring/otelpgx" || s.SpanKind != trace.SpanKindClient {
			continue
		}
		if s.Parent.SpanID() == attempt.SpanContext.SpanID() {
			queries++
			continue
		}
		// Anything else otelpgx traced (the connect, the acquire) still
		// belongs to the call's trace.
		if s.SpanContext.TraceID() != txSpan.SpanContext.TraceID() {
			t.Errorf("otelpgx span %q outside the call's trace", s.Name)
		}
	}
	var sawSelect bool // fn's statement, by its text
	for _, s := range spans {
		for _, kv := range s.Attributes {
			if kv.Key == semconv.DBQueryTextKey && kv.Value.AsString() == "select 1" {
				sawSelect = s.Parent.SpanID() == attempt.SpanContext.SpanID()
			}
		}
	}
	if queries == 0 || !sawSelect {
		t.Errorf("%d otelpgx client spans under the attempt (select among them: %v); spans: %v", queries, sawSelect, names(spans))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sm.Scope.Name == pgtxotel.ScopeName {
				seen[m.Name] = true
			}
		}
	}
	for _, name := range []string{"db.client.operation.duration", "db.client.connection.wait_time", "db.client.connection.use_time"} {
		if !seen[name] {
			t.Errorf("pgtxotel recorded no %s", name)
		}
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name+" <"+s.InstrumentationScope.Name+">")
	}
	return out
}
