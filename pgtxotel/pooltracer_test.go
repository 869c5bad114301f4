package pgtxotel

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestPoolTracer drives a PoolTracer with pgxpool's events: two acquires
// (one failed) and one release record wait_time twice and use_time once.
func TestPoolTracer(t *testing.T) {
	mp, reader := newManualMeterProvider(t)
	pt := NewPoolTracer("main", WithMeterProvider(mp), WithAttributes(attribute.String("db.namespace", "shop")))
	conn := &pgx.Conn{}
	ctx := pt.TraceAcquireStart(context.Background(), nil, pgxpool.TraceAcquireStartData{})
	time.Sleep(2 * time.Millisecond)
	pt.TraceAcquireEnd(ctx, nil, pgxpool.TraceAcquireEndData{Conn: conn})
	time.Sleep(3 * time.Millisecond)
	pt.TraceRelease(nil, pgxpool.TraceReleaseData{Conn: conn})
	pt.TraceRelease(nil, pgxpool.TraceReleaseData{Conn: conn}) // released once only
	ctx = pt.TraceAcquireStart(context.Background(), nil, pgxpool.TraceAcquireStartData{})
	pt.TraceAcquireEnd(ctx, nil, pgxpool.TraceAcquireEndData{Err: errors.New("timeout")})

	rm := collect(t, reader)
	for _, tt := range []struct {
		name  string
		count uint64
		min   float64
	}{
		{"db.client.connection.wait_time", 2, 0.002},
		{"db.client.connection.use_time", 1, 0.003},
	} {
		m := mustFindMetric(t, rm, tt.name)
		if m.Unit != "s" {
			t.Errorf("%s unit = %q, want s", tt.name, m.Unit)
		}
		h := m.Data.(metricdata.Histogram[float64])
		if len(h.DataPoints) != 1 {
			t.Fatalf("%s: %d points, want 1", tt.name, len(h.DataPoints))
		}
		dp := h.DataPoints[0]
		if got, want := setKey(dp.Attributes), "db.client.connection.pool.name=main,db.namespace=shop"; got != want {
			t.Errorf("%s attributes = %s, want %s", tt.name, got, want)
		}
		if dp.Count != tt.count || dp.Sum < tt.min {
			t.Errorf("%s count, sum = %d, %g; want %d, >= %g", tt.name, dp.Count, dp.Sum, tt.count, tt.min)
		}
		if len(dp.Bounds) != len(durationBuckets) {
			t.Errorf("%s bounds = %v, want %v", tt.name, dp.Bounds, durationBuckets)
		}
	}
}
