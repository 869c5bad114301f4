package pgtxotel

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"
)

// PoolTracer records the connection pool's distributions,
// db.client.connection.wait_time (each acquire, on every path, failed ones
// included) and db.client.connection.use_time (from acquire to release),
// from pgxpool's acquire and release events. OpenTelemetry has no
// observable histogram, so [RegisterPoolMetrics] cannot report them from a
// snapshot.
//
// Set it as the pgx tracer of the pool's connections,
// [pgtx.Config].ConnConfig.Tracer, before creating the pool; beside another
// pgx tracer such as otelpgx's, join them with pgx's
// github.com/jackc/pgx/v5/multitracer:
//
//	cfg.ConnConfig.Tracer = multitracer.New(otelpgx.NewTracer(), pt)
//
// Its measurements carry db.client.connection.pool.name, the name given to
// [NewPoolTracer], and the attributes of [WithAttributes]. A PoolTracer is
// safe for concurrent use; give each pool its own.
type PoolTracer struct {
	wait, use metric.Float64Histogram
	opts      []metric.RecordOption
	acquired  sync.Map // *pgx.Conn -> time.Time, the end of its acquire
}

// Compile-time checks of the interfaces pgx and pgxpool look for.
var (
	_ pgx.QueryTracer       = (*PoolTracer)(nil)
	_ pgxpool.AcquireTracer = (*PoolTracer)(nil)
	_ pgxpool.ReleaseTracer = (*PoolTracer)(nil)
)

// NewPoolTracer returns the [PoolTracer] of the pool called name. An
// instrument that cannot be created is reported to [otel.Handle], and the
// PoolTracer then records nothing.
func NewPoolTracer(name string, opts ...PoolOption) *PoolTracer {
	c := newPoolConfig(opts)
	buckets := metric.WithExplicitBucketBoundaries(durationBuckets...)
	instruments := func(m metric.Meter) (metric.Float64Histogram, metric.Float64Histogram, error) {
		wait, err1 := dbconv.NewClientConnectionWaitTime(m, buckets)
		use, err2 := dbconv.NewClientConnectionUseTime(m, buckets)
		return wait.Inst(), use.Inst(), errors.Join(err1, err2)
	}
	wait, use, err := instruments(c.mp.Meter(ScopeName))
	if err != nil {
		otel.Handle(errors.Join(errors.New("pgtxotel: creating pool tracer instruments"), err))
		// A no-op meter creates every instrument without an error.
		wait, use, _ = instruments(noop.NewMeterProvider().Meter(ScopeName))
	}
	set := attribute.NewSet(poolAttrs(c.attrs, name)...)
	return &PoolTracer{wait: wait, use: use, opts: []metric.RecordOption{metric.WithAttributeSet(set)}}
}

// acquireStartKey is the context key of an acquire's start time.
type acquireStartKey struct{}

// TraceAcquireStart notes when the acquire started.
func (t *PoolTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return context.WithValue(ctx, acquireStartKey{}, time.Now())
}

// TraceAcquireEnd records the acquire's db.client.connection.wait_time and,
// when it got a connection, notes when its use began.
func (t *PoolTracer) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, data pgxpool.TraceAcquireEndData) {
	now := time.Now()
	if start, ok := ctx.Value(acquireStartKey{}).(time.Time); ok {
		t.wait.Record(ctx, now.Sub(start).Seconds(), t.opts...)
	}
	if data.Err == nil && data.Conn != nil {
		t.acquired.Store(data.Conn, now)
	}
}

// TraceRelease records the connection's db.client.connection.use_time.
func (t *PoolTracer) TraceRelease(_ *pgxpool.Pool, data pgxpool.TraceReleaseData) {
	if v, ok := t.acquired.LoadAndDelete(data.Conn); ok {
		t.use.Record(context.Background(), time.Since(v.(time.Time)).Seconds(), t.opts...)
	}
}

// TraceQueryStart and TraceQueryEnd make PoolTracer a [pgx.QueryTracer], as
// ConnConfig.Tracer must be; they do nothing.
func (t *PoolTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd does nothing.
func (t *PoolTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
