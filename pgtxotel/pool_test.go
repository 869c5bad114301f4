package pgtxotel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// offlineDSN points at a port nothing listens on: pools connect lazily, so
// one made from it works for Stats and fails every acquire at once.
const offlineDSN = "postgres://pgtx@127.0.0.1:1/pgtx?connect_timeout=1"

// newOfflinePool returns a pool that never reaches a server, with maxConns
// connections at most, no cancel pool (so no background connect) and no
// retries. It is closed when the test ends.
func newOfflinePool(t *testing.T, maxConns int32) *pgtx.Pool {
	t.Helper()
	return newOfflinePoolWith(t, func(cfg *pgtx.Config) { cfg.MaxConns = maxConns })
}

// newOfflinePoolWith is newOfflinePool with the configuration edited by
// edit.
func newOfflinePoolWith(t *testing.T, edit func(*pgtx.Config)) *pgtx.Pool {
	t.Helper()
	cfg, err := pgtx.ParseConfig(offlineDSN)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	cfg.CancelMode = pgtx.CancelModeProtocol
	cfg.Retry.MaxRetries = -1
	cfg.Retry.MaxAdaptiveRetries = -1
	cfg.Retry.UnavailableTimeout = -1
	edit(cfg)
	pool, err := pgtx.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("NewWithConfig: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newManualMeterProvider returns a meter provider read by the returned
// manual reader, shut down when the test ends.
func newManualMeterProvider(t *testing.T) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, reader
}

// registerPool calls RegisterPoolMetrics and unregisters when the test ends.
func registerPool(t *testing.T, pool *pgtx.Pool, name string, opts ...PoolOption) metric.Registration {
	t.Helper()
	reg, err := RegisterPoolMetrics(pool, name, opts...)
	if err != nil {
		t.Fatalf("RegisterPoolMetrics(%q): %v", name, err)
	}
	t.Cleanup(func() { _ = reg.Unregister() })
	return reg
}

// poolPoints returns the values of the points of the observable instrument
// name whose attributes include by, with the checks that the instrument has
// the kind, monotonicity and unit wanted.
func poolPoints(t *testing.T, rm metricdata.ResourceMetrics, name string, want instrumentKind, by ...attribute.KeyValue) []float64 {
	t.Helper()
	m, ok := findMetric(rm, name)
	if !ok {
		return nil
	}
	if m.Unit != want.unit {
		t.Errorf("%s unit = %q, want %q", name, m.Unit, want.unit)
	}
	var got []float64
	switch d := m.Data.(type) {
	case metricdata.Gauge[int64]:
		assertKind(t, name, want, "int64 gauge")
		for _, dp := range d.DataPoints {
			if matches(dp.Attributes, by) {
				got = append(got, float64(dp.Value))
			}
		}
	case metricdata.Gauge[float64]:
		assertKind(t, name, want, "float64 gauge")
		for _, dp := range d.DataPoints {
			if matches(dp.Attributes, by) {
				got = append(got, dp.Value)
			}
		}
	case metricdata.Sum[int64]:
		if !d.IsMonotonic {
			assertKind(t, name, want, "int64 updowncounter")
			for _, dp := range d.DataPoints {
				if matches(dp.Attributes, by) {
					got = append(got, float64(dp.Value))
				}
			}
			break
		}
		assertKind(t, name, want, "int64 counter")
		if d.Temporality != metricdata.CumulativeTemporality {
			t.Errorf("%s: monotonic %v, temporality %v; want a cumulative counter", name, d.IsMonotonic, d.Temporality)
		}
		for _, dp := range d.DataPoints {
			if matches(dp.Attributes, by) {
				got = append(got, float64(dp.Value))
			}
		}
	case metricdata.Sum[float64]:
		assertKind(t, name, want, "float64 counter")
		if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
			t.Errorf("%s: monotonic %v, temporality %v; want a cumulative counter", name, d.IsMonotonic, d.Temporality)
		}
		for _, dp := range d.DataPoints {
			if matches(dp.Attributes, by) {
				got = append(got, dp.Value)
			}
		}
	default:
		t.Fatalf("%s is a %T", name, m.Data)
	}
	return got
}

// instrumentKind is what an instrument of RegisterPoolMetrics must be.
type instrumentKind struct {
	kind string // "int64 gauge", "float64 gauge", "int64 counter" or "float64 counter"
	unit string
}

func assertKind(t *testing.T, name string, want instrumentKind, got string) {
	t.Helper()
	if got != want.kind {
		t.Errorf("%s is an %s, want an %s", name, got, want.kind)
	}
}

func int64Gauge(unit string) instrumentKind   { return instrumentKind{"int64 gauge", unit} }
func int64Counter(unit string) instrumentKind { return instrumentKind{"int64 counter", unit} }
func int64UpDown(unit string) instrumentKind  { return instrumentKind{"int64 updowncounter", unit} }

var (
	secondsGauge   = instrumentKind{"float64 gauge", "s"}
	secondsCounter = instrumentKind{"float64 counter", "s"}
	mainSlots      = attribute.String("pgtx.slot.pool", "main")
	cancelSlots    = attribute.String("pgtx.slot.pool", "cancel")
)

func TestRegisterPoolMetrics(t *testing.T) {
	mp, reader := newManualMeterProvider(t)
	a, b := newOfflinePool(t, 3), newOfflinePool(t, 5)
	ns := attribute.String("db.namespace", "shop")
	registerPool(t, a, "a", WithMeterProvider(mp), WithAttributes(ns))
	registerPool(t, b, "b", WithMeterProvider(mp), WithAttributes(ns))

	// One call on "a" that cannot connect: it is counted, and so is its
	// (failed) wait for a connection.
	err := pgtx.Transaction(context.Background(), a, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
	if err == nil {
		t.Fatal("Transaction on a closed port succeeded")
	}

	rm := collect(t, reader)
	poolA, poolB := semconv.DBClientConnectionPoolName("a"), semconv.DBClientConnectionPoolName("b")
	tests := []struct {
		name       string
		kind       instrumentKind
		by         []attribute.KeyValue
		wantA      float64
		wantB      float64
		atLeastOne bool // wantA is a lower bound
	}{
		{name: "db.client.connection.pending_requests", kind: int64UpDown("{request}")},
		{name: "db.client.connection.max", kind: int64UpDown("{connection}"), wantA: 3, wantB: 5},
		{name: "db.client.connection.count", kind: int64UpDown("{connection}"), by: []attribute.KeyValue{semconv.DBClientConnectionStateUsed}},
		{name: "db.client.connection.count", kind: int64UpDown("{connection}"), by: []attribute.KeyValue{semconv.DBClientConnectionStateIdle}},
		{name: "db.client.connection.timeouts", kind: int64Counter("{timeout}")},
		{name: "pgtx.pool.queue_full.count", kind: int64Counter("{transaction}")},
		{name: "pgtx.pool.in_flight", kind: int64UpDown("{transaction}")},
		{name: "pgtx.pool.oldest_in_flight", kind: secondsGauge},
		{name: "pgtx.slot.limit", kind: int64UpDown("{connection}"), by: []attribute.KeyValue{mainSlots}, wantA: 3, wantB: 5},
		{name: "pgtx.slot.refusal.count", kind: int64Counter("{connect}"), by: []attribute.KeyValue{mainSlots}},
		{name: "pgtx.slot.probe.count", kind: int64Counter("{connect}"), by: []attribute.KeyValue{mainSlots}},
		{name: "pgtx.slot.raise.count", kind: int64Counter("{connect}"), by: []attribute.KeyValue{mainSlots}},
		{name: "pgtx.slot.wait.count", kind: int64Counter("{acquire}"), by: []attribute.KeyValue{mainSlots}},
		{name: "pgtx.slot.wait.time", kind: secondsCounter, by: []attribute.KeyValue{mainSlots}},
	}
	for _, tt := range tests {
		t.Run(tt.name+attrString(tt.by), func(t *testing.T) {
			for _, pool := range []struct {
				attr attribute.KeyValue
				want float64
			}{{poolA, tt.wantA}, {poolB, tt.wantB}} {
				got := poolPoints(t, rm, tt.name, tt.kind, append([]attribute.KeyValue{pool.attr, ns}, tt.by...)...)
				if len(got) != 1 {
					t.Fatalf("%s: %d points, want 1", pool.attr.Value.String(), len(got))
				}
				if tt.atLeastOne && pool.attr == poolA {
					if got[0] <= 0 {
						t.Errorf("%s = %g, want > 0", pool.attr.Value.String(), got[0])
					}
					continue
				}
				if got[0] != pool.want {
					t.Errorf("%s = %g, want %g", pool.attr.Value.String(), got[0], pool.want)
				}
			}
		})
	}

	// Every instrument is in the package's scope and has only these series.
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ScopeName {
			t.Errorf("scope = %q, want %q", sm.Scope.Name, ScopeName)
		}
		for _, m := range sm.Metrics {
			want := 2
			if m.Name == "db.client.connection.count" {
				want = 4
			}
			if n := len(poolPoints(t, rm, m.Name, kindOf(m), ns)); n != want {
				t.Errorf("%s: %d points, want %d", m.Name, n, want)
			}
		}
	}
}

// TestRegisterPoolMetricsCancelSlots: a pool with a cancel pool reports
// the cancel pool's slots beside its own, under pgtx.slot.pool=cancel; a
// pool without one reports only its own.
func TestRegisterPoolMetricsCancelSlots(t *testing.T) {
	mp, reader := newManualMeterProvider(t)
	withCancel := newOfflinePoolWith(t, func(cfg *pgtx.Config) {
		cfg.MaxConns = 4
		cfg.CancelMode = pgtx.CancelModePool
	})
	registerPool(t, withCancel, "with", WithMeterProvider(mp))
	registerPool(t, newOfflinePool(t, 2), "without", WithMeterProvider(mp))
	rm := collect(t, reader)
	tests := []struct {
		pool string
		by   attribute.KeyValue
		want []float64
	}{
		{"with", mainSlots, []float64{4}},
		{"with", cancelSlots, []float64{float64(withCancel.Stats().CancelSlots.Limit)}},
		{"without", mainSlots, []float64{2}},
		{"without", cancelSlots, nil},
	}
	for _, tt := range tests {
		t.Run(tt.pool+attrString([]attribute.KeyValue{tt.by}), func(t *testing.T) {
			got := poolPoints(t, rm, "pgtx.slot.limit", int64UpDown("{connection}"), semconv.DBClientConnectionPoolName(tt.pool), tt.by)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("pgtx.slot.limit = %v, want %v", got, tt.want)
			}
		})
	}
	if withCancel.Stats().CancelSlots.Limit < 1 {
		t.Errorf("the cancel pool's slot limit is %d, want at least 1", withCancel.Stats().CancelSlots.Limit)
	}
}

// kindOf returns the kind of m's data, for a check that does not care.
func kindOf(m metricdata.Metrics) instrumentKind {
	k := instrumentKind{unit: m.Unit}
	switch m.Data.(type) {
	case metricdata.Gauge[int64]:
		k.kind = "int64 gauge"
	case metricdata.Gauge[float64]:
		k.kind = "float64 gauge"
	case metricdata.Sum[int64]:
		k.kind = "int64 counter"
		if !m.Data.(metricdata.Sum[int64]).IsMonotonic {
			k.kind = "int64 updowncounter"
		}
	case metricdata.Sum[float64]:
		k.kind = "float64 counter"
	}
	return k
}

// attrString renders kvs for a subtest name.
func attrString(kvs []attribute.KeyValue) string {
	var b strings.Builder
	for _, kv := range kvs {
		b.WriteString("/" + string(kv.Key) + "=" + kv.Value.String())
	}
	return b.String()
}

// TestRegisterPoolMetricsBreaker drives circuit breakers with calls that
// cannot connect: each opens after one failure; one stays open for an hour,
// the other goes half-open at once. A pool without a breaker reports none.
func TestRegisterPoolMetricsBreaker(t *testing.T) {
	mp, reader := newManualMeterProvider(t)
	newPool := func(openFor time.Duration) *pgtx.Pool {
		return newOfflinePoolWith(t, func(cfg *pgtx.Config) {
			cfg.Breaker = &pgtx.BreakerConfig{ConsecutiveFailures: 1, OpenFor: openFor}
		})
	}
	open, half := newPool(time.Hour), newPool(time.Nanosecond)
	registerPool(t, open, "open", WithMeterProvider(mp))
	registerPool(t, half, "half", WithMeterProvider(mp))
	registerPool(t, newOfflinePool(t, 1), "none", WithMeterProvider(mp))
	call := func(pool *pgtx.Pool) error {
		return pgtx.Transaction(context.Background(), pool, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
	}

	type values struct{ state, rejected, opens float64 }
	steps := []struct {
		name string
		do   func(t *testing.T)
		want map[string]values
	}{
		{
			name: "closed",
			do:   func(*testing.T) {},
			want: map[string]values{"open": {0, 0, 0}, "half": {0, 0, 0}},
		},
		{
			name: "a failure opens both",
			do: func(t *testing.T) {
				for _, p := range []*pgtx.Pool{open, half} {
					if err := call(p); err == nil || errors.Is(err, pgtx.ErrCircuitOpen) {
						t.Fatalf("Transaction = %v, want a connect error", err)
					}
				}
				time.Sleep(time.Millisecond) // past the half-open pool's OpenFor
			},
			want: map[string]values{"open": {2, 0, 1}, "half": {1, 0, 1}},
		},
		{
			name: "the open breaker refuses",
			do: func(t *testing.T) {
				if err := call(open); !errors.Is(err, pgtx.ErrCircuitOpen) {
					t.Fatalf("Transaction = %v, want ErrCircuitOpen", err)
				}
			},
			want: map[string]values{"open": {2, 1, 1}, "half": {1, 0, 1}},
		},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.do(t)
			rm := collect(t, reader)
			one := func(name string, kind instrumentKind, pool string) float64 {
				t.Helper()
				got := poolPoints(t, rm, name, kind, semconv.DBClientConnectionPoolName(pool))
				if len(got) != 1 {
					t.Fatalf("%s{pool=%s}: %d points, want 1", name, pool, len(got))
				}
				return got[0]
			}
			for pool, want := range st.want {
				got := values{
					one("pgtx.breaker.state", int64Gauge("{state}"), pool),
					one("pgtx.breaker.rejection.count", int64Counter("{transaction}"), pool),
					one("pgtx.breaker.open.count", int64Counter("{open}"), pool),
				}
				if got != want {
					t.Errorf("pool %s: state, rejected, opens = %v, want %v", pool, got, want)
				}
			}
			for _, name := range []string{"pgtx.breaker.state", "pgtx.breaker.rejection.count", "pgtx.breaker.open.count"} {
				if n := len(poolPoints(t, rm, name, kindOf(mustFindMetric(t, rm, name)), semconv.DBClientConnectionPoolName("none"))); n != 0 {
					t.Errorf("%s: %d points for the pool without a breaker, want 0", name, n)
				}
			}
		})
	}
}

// mustFindMetric returns the metric name of rm, failing the test without it.
func mustFindMetric(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.Metrics {
	t.Helper()
	m, ok := findMetric(rm, name)
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	return m
}

func TestBreakerStateValue(t *testing.T) {
	tests := []struct {
		state pgtx.BreakerState
		want  int64
	}{
		{pgtx.BreakerClosed, 0},
		{pgtx.BreakerHalfOpen, 1},
		{pgtx.BreakerOpen, 2},
		{pgtx.BreakerState(42), -1},
	}
	for _, tt := range tests {
		t.Run(tt.state.String(), func(t *testing.T) {
			if got := breakerStateValue(tt.state); got != tt.want {
				t.Errorf("breakerStateValue(%v) = %d, want %d", tt.state, got, tt.want)
			}
		})
	}
}

func TestRegisterPoolMetricsUnregister(t *testing.T) {
	tests := []struct {
		name        string
		unregister  []string
		wantPresent []string
	}{
		{"none", nil, []string{"a", "b"}},
		{"one of two", []string{"a"}, []string{"b"}},
		{"both", []string{"a", "b"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mp, reader := newManualMeterProvider(t)
			regs := map[string]metric.Registration{
				"a": registerPool(t, newOfflinePool(t, 2), "a", WithMeterProvider(mp)),
				"b": registerPool(t, newOfflinePool(t, 2), "b", WithMeterProvider(mp)),
			}
			_ = collect(t, reader)
			for _, name := range tt.unregister {
				if err := regs[name].Unregister(); err != nil {
					t.Fatalf("Unregister(%s): %v", name, err)
				}
			}
			rm := collect(t, reader)
			for _, name := range []string{"a", "b"} {
				got := len(poolPoints(t, rm, "db.client.connection.pending_requests", int64UpDown("{request}"), semconv.DBClientConnectionPoolName(name)))
				want := 0
				for _, p := range tt.wantPresent {
					if p == name {
						want = 1
					}
				}
				if got != want {
					t.Errorf("pool %s: %d waiters points, want %d", name, got, want)
				}
			}
		})
	}
}

// TestRegisterPoolMetricsNilPool: a nil pool is an invalid argument, named
// in the error, and nothing is registered.
func TestRegisterPoolMetricsNilPool(t *testing.T) {
	reg, err := RegisterPoolMetrics(nil, "x", WithMeterProvider(noop.NewMeterProvider()))
	if !errors.Is(err, pgtx.ErrInvalidArgument) {
		t.Fatalf("error = %v, want one matching pgtx.ErrInvalidArgument", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `"x"`) || !strings.Contains(msg, "nil pool") {
		t.Errorf("error %q does not name the pool and the nil pool", msg)
	}
	if reg != nil {
		t.Error("RegisterPoolMetrics returned a Registration with an error")
	}
}

// failingObservableMeter refuses to create one observable instrument.
type failingObservableMeter struct {
	noop.Meter
	fail string
}

func (m failingObservableMeter) refuse(name string) error {
	if name == m.fail {
		return errors.New("refused " + name)
	}
	return nil
}

func (m failingObservableMeter) Int64ObservableGauge(name string, opts ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	i, _ := m.Meter.Int64ObservableGauge(name, opts...)
	return i, m.refuse(name)
}

func (m failingObservableMeter) Int64ObservableCounter(name string, opts ...metric.Int64ObservableCounterOption) (metric.Int64ObservableCounter, error) {
	i, _ := m.Meter.Int64ObservableCounter(name, opts...)
	return i, m.refuse(name)
}

func (m failingObservableMeter) Float64ObservableGauge(name string, opts ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	i, _ := m.Meter.Float64ObservableGauge(name, opts...)
	return i, m.refuse(name)
}

func (m failingObservableMeter) Int64ObservableUpDownCounter(name string, opts ...metric.Int64ObservableUpDownCounterOption) (metric.Int64ObservableUpDownCounter, error) {
	i, _ := m.Meter.Int64ObservableUpDownCounter(name, opts...)
	return i, m.refuse(name)
}

type failingObservableProvider struct {
	noop.MeterProvider
	fail string
}

func (p failingObservableProvider) Meter(string, ...metric.MeterOption) metric.Meter {
	return failingObservableMeter{fail: p.fail}
}

func TestRegisterPoolMetricsInstrumentError(t *testing.T) {
	pool := newOfflinePool(t, 1)
	for _, name := range []string{"db.client.connection.pending_requests", "db.client.connection.count", "db.client.connection.timeouts", "pgtx.pool.queue_full.count", "pgtx.pool.oldest_in_flight", "pgtx.breaker.open.count"} {
		t.Run(name, func(t *testing.T) {
			reg, err := RegisterPoolMetrics(pool, "p", WithMeterProvider(failingObservableProvider{fail: name}))
			if err == nil || !strings.Contains(err.Error(), "refused "+name) {
				t.Errorf("error = %v, want it to name %s", err, name)
			}
			if reg != nil {
				t.Error("RegisterPoolMetrics returned a Registration with an error")
			}
		})
	}
}

// ExampleRegisterPoolMetrics reports a pool's statistics with the global
// meter provider, under db.client.connection.pool.name="main", until the registration is undone.
func ExampleRegisterPoolMetrics() {
	ctx := context.Background()
	pool, err := pgtx.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	reg, err := RegisterPoolMetrics(pool, "main", WithAttributes(attribute.String("db.namespace", "shop")))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = reg.Unregister() }() // runs before pool.Close
}

// TestTracerOnPool sets a Tracer as a pool's Config.Tracer: a call that
// cannot connect is counted and traced, and the circuit breaker it opens is
// counted without BreakerConfig.Tracer being set.
func TestTracerOnPool(t *testing.T) {
	h := newHarness(t)
	pool := newOfflinePoolWith(t, func(cfg *pgtx.Config) {
		cfg.Tracer = h.tr
		cfg.Breaker = &pgtx.BreakerConfig{Name: "offline", ConsecutiveFailures: 1, OpenFor: time.Hour}
	})
	ctx, caller := h.tp.Tracer("test").Start(context.Background(), "caller")
	err := pgtx.TransactionWithOptions(ctx, pool, pgtx.ReadCommitted, pgtx.Options{Label: "probe"},
		func(context.Context, pgx.Tx) error { return nil })
	caller.End()
	if err == nil {
		t.Fatal("Transaction on a closed port succeeded")
	}
	rm := collect(t, h.reader)
	if got := sumInt(t, rm, "pgtx.transaction.count", attribute.String("pgtx.outcome", "failed"), attribute.String("pgtx.label", "probe")); got != 1 {
		t.Errorf("pgtx.transaction.count{failed, probe} = %d, want 1", got)
	}
	by := []attribute.KeyValue{
		attribute.String("pgtx.breaker.name", "offline"),
		attribute.String("pgtx.breaker.from", "closed"),
		attribute.String("pgtx.breaker.to", "open"),
	}
	if got := sumInt(t, rm, "pgtx.breaker.transition.count", by...); got != 1 {
		t.Errorf("pgtx.breaker.transition.count%v = %d, want 1", by, got)
	}
	if s := findSpan(t, h.spans.Ended(), "pgtx.transaction probe"); s.Status().Code != codes.Error {
		t.Errorf("span status = %v, want Error", s.Status())
	}
	var names []string
	for _, e := range findSpan(t, h.spans.Ended(), "caller").Events() {
		names = append(names, e.Name)
	}
	if len(names) != 1 || names[0] != "pgtx.breaker.state_change" {
		t.Errorf("caller's span events = %v, want one pgtx.breaker.state_change", names)
	}
}
