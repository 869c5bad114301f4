// Package tracers joins several pgtx tracers into one, so that one pool's
// events reach a log and metrics alike:
//
//	cfg.Tracer = tracers.Join(pgtxslog.NewTracer(), pgtxprom.NewTracer())
//
// Each optional event ([pgtx.CancelTracer], [pgtx.ContentionTracer],
// [pgtx.BreakerTracer], [failover.Tracer], [pooler.Tracer]) reaches the
// joined tracers that implement its interface, and only those.
package tracers
