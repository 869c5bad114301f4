// Package pgtxotel reports pgtx transactions and pools to OpenTelemetry,
// under the names of the database semantic conventions where there is one
// (db.client.operation.duration, db.client.connection.*) and in the pgtx
// namespace for the rest, with times in seconds, so that its telemetry
// joins existing dashboards.
//
// A [Tracer], set as [pgtx.Config].Tracer, makes one internal span per
// [pgtx.Transaction] call with a child span per attempt, under which the
// client spans of pgx's own tracers (otelpgx's) nest, and counts calls,
// attempts, retries, cancels, breaker and contention changes and lost
// commits, and marks on the attempt's span the connects refused for lack
// of connection slots. [RegisterPoolMetrics] observes a pool's
// [pgtx.Stats] at each collection, its connection slots included. A [PoolTracer], a pgx tracer of the pool's connections,
// records the connection wait and use times, which a snapshot cannot give:
//
//	cfg, err := pgtx.ParseConfig(connString)
//	cfg.Tracer = pgtxotel.NewTracer()
//	cfg.ConnConfig.Tracer = pgtxotel.NewPoolTracer("main")
//	pool, err := pgtx.NewWithConfig(ctx, cfg)
//	reg, err := pgtxotel.RegisterPoolMetrics(pool, "main")
//
// The With functions make the options. An [Option] is taken by every
// constructor; a [TracerOption] only by [NewTracer]; a [PoolOption] by
// [NewPoolTracer] and [RegisterPoolMetrics]. Labels become metric series:
// after 256 distinct labels, further ones are reported in metrics as
// pgtx.label="_other".
//
// The repository's docs/observability.md lists every span, attribute,
// event and instrument.
package pgtxotel
