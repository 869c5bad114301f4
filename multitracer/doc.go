// Package multitracer sends the events of one pgtx pool to several tracers,
// as pgx's multitracer does for pgx's tracers: a log (pgtxslog) and metrics
// (pgtxprom or pgtxotel) from the same pool.
//
//	cfg.Tracer = multitracer.New(pgtxslog.NewTracer(), pgtxprom.NewTracer())
//
// Each optional interface of pgtx ([pgtx.CancelTracer],
// [pgtx.ContentionTracer], [pgtx.BreakerTracer], and [failover.Tracer] of
// github.com/pgtx-go/pgtx/failover) reaches the tracers that implement it,
// and only those.
package multitracer
