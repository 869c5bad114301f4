package pgtxotel

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// config is what the Options set.
type config struct {
	tp    trace.TracerProvider
	mp    metric.MeterProvider
	attrs []attribute.KeyValue
}

// Option configures a [Tracer] made by [NewTracer], the instruments of
// [RegisterPoolMetrics], or a [PoolTracer].
type Option func(*config)

// WithTracerProvider sets the provider of the [Tracer]'s spans. The default
// is [otel.GetTracerProvider] at the time [NewTracer] is called.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets the provider of the metrics. The default is
// [otel.GetMeterProvider] at the time [NewTracer], [RegisterPoolMetrics] or
// [NewPoolTracer] is called.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithAttributes adds attrs to every span and every measurement, for
// instance semconv's db.namespace or server.address to tell databases
// apart. Calls accumulate.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, attrs...) }
}

func newConfig(opts []Option) config {
	var c config
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	return c
}
