package pgtxotel

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// config is what the options set.
type config struct {
	tp    trace.TracerProvider
	mp    metric.MeterProvider
	attrs []attribute.KeyValue
}

// TracerOption configures a [Tracer] made by [NewTracer].
type TracerOption interface {
	applyTracer(*config)
}

// PoolOption configures the instruments of [NewPoolTracer] and
// [RegisterPoolMetrics], which record metrics only.
type PoolOption interface {
	applyPool(*config)
}

// Option configures a [Tracer] and the pool's instruments alike.
type Option interface {
	TracerOption
	PoolOption
}

// tracerProviderOption is the TracerOption of WithTracerProvider.
type tracerProviderOption struct{ tp trace.TracerProvider }

func (o tracerProviderOption) applyTracer(c *config) { c.tp = o.tp }

// meterProviderOption is the Option of WithMeterProvider.
type meterProviderOption struct{ mp metric.MeterProvider }

func (o meterProviderOption) applyTracer(c *config) { c.mp = o.mp }
func (o meterProviderOption) applyPool(c *config)   { c.mp = o.mp }

// attributesOption is the Option of WithAttributes.
type attributesOption []attribute.KeyValue

func (o attributesOption) applyTracer(c *config) { c.attrs = append(c.attrs, o...) }
func (o attributesOption) applyPool(c *config)   { c.attrs = append(c.attrs, o...) }

// WithTracerProvider sets the provider of the [Tracer]'s spans, by default
// [otel.GetTracerProvider] at the time [NewTracer] is called. Only a
// Tracer makes spans, so only NewTracer takes it.
func WithTracerProvider(tp trace.TracerProvider) TracerOption {
	return tracerProviderOption{tp}
}

// WithMeterProvider sets the provider of the metrics, by default
// [otel.GetMeterProvider] at the time of the constructor's call.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return meterProviderOption{mp}
}

// WithAttributes adds attrs to every span and every measurement, for
// instance semconv's db.namespace or server.address to tell databases
// apart. Calls accumulate.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return attributesOption(append([]attribute.KeyValue(nil), attrs...))
}

// newTracerConfig applies opts, skipping nil ones, over the defaults.
func newTracerConfig(opts []TracerOption) config {
	var c config
	for _, opt := range opts {
		if opt != nil {
			opt.applyTracer(&c)
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

// newPoolConfig applies opts, skipping nil ones, over the defaults.
func newPoolConfig(opts []PoolOption) config {
	var c config
	for _, opt := range opts {
		if opt != nil {
			opt.applyPool(&c)
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	return c
}
