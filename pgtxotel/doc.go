// Package pgtxotel reports pgtx transactions and pools as OpenTelemetry
// spans and metrics, under the names of the OpenTelemetry database
// semantic conventions where there is one (db.client.operation.duration,
// db.client.connection.*), and under the pgtx namespace, with singular
// names, for the rest. All times are in seconds, on metrics, span
// attributes and event attributes alike.
//
// A [Tracer] adapts every tracer interface of pgtx:
// [pgtx.TransactionTracer], [pgtx.CancelTracer], [pgtx.BreakerTracer],
// [pgtx.ContentionTracer] and [failover.Tracer]. Set it as the pool's
// tracer; [RegisterPoolMetrics] reports the pool's [pgtx.Stats], and a
// [PoolTracer], a pgx tracer of the pool's connections, its connection
// wait and use times:
//
//	tr := pgtxotel.NewTracer()
//	pt := pgtxotel.NewPoolTracer("main")
//	cfg, err := pgtx.ParseConfig(connString)
//	cfg.Tracer = tr
//	cfg.ConnConfig.Tracer = pt // or multitracer.New(otelpgx.NewTracer(), pt)
//	pool, err := pgtx.NewWithConfig(ctx, cfg)
//	reg, err := pgtxotel.RegisterPoolMetrics(pool, "main")
//
// # Spans
//
// Every [pgtx.Transaction] call is one span, "pgtx.transaction" (or
// "pgtx.transaction <label>" when [pgtx.Options].Label is set), a child of
// the span in the caller's context, of kind internal: it is an umbrella
// over several client calls (BEGIN, fn's statements, COMMIT, on every
// attempt) and the backoff sleeps between attempts. Its attributes are
// db.system.name ("postgresql"), pgtx.isolation, pgtx.label (when set) and
// those given with WithAttributes; when the call ends, pgtx.attempt.count;
// when it failed, the status Error with the error's message, the error
// recorded as an exception event, pgtx.class (the [pgtx.Class]:
// "conflict", "overload", "unavailable", "connection_lost", "ambiguous",
// "timeout" or "permanent"), error.type, db.response.status_code (the
// SQLSTATE, when the error holds a *pgconn.PgError),
// pgtx.commit_unknown=true when it matches [pgtx.ErrCommitUnknown] and
// pgtx.retry_budget_exhausted=true when it matches
// [pgtx.ErrRetryBudgetExhausted]. A call that committed leaves the status
// Unset, as OpenTelemetry asks of instrumentation libraries.
//
// error.type is, as the convention asks, the SQLSTATE when there is one
// (it then equals db.response.status_code: "40001", "53300", "57014"...),
// and otherwise the pgtx class ("ambiguous" for a lost COMMIT answer,
// "timeout" for a context or acquire timeout, "connection_lost"...).
//
// Each attempt is a child span of the call's, "pgtx.attempt", of kind
// internal, from the attempt's start (before its admission and acquire) to
// its end (after release and the retry decision; the backoff that follows
// is the gap before the next attempt). Its context is the one fn receives,
// so the client spans of pgx's tracers (otelpgx's query spans) nest under
// it. Attributes: pgtx.attempt.number (from 1), pgtx.class ("none" when it
// committed), pgtx.retry, pgtx.retry.backoff (s, when a retry follows),
// pgtx.contention.wait (s) and pgtx.contention.limit (when the contention
// manager's gate admitted it) and, when it failed, the status Error,
// error.type, db.response.status_code, pgtx.commit_unknown and
// pgtx.retry_budget_exhausted as on the call's span. No attempt span is
// made for a call whose span is not recording.
//
// Events:
//
//   - "pgtx.cancel", on the span of the cancelled statement's context (an
//     otelpgx query span, the attempt's), if it is still recording when the
//     cancel finishes: pgtx.cancel.outcome ("signalled", "not_found",
//     "protocol" or "closed"), pgtx.cancel.mode (the pool's
//     [pgtx.CancelMode]: "pool", "protocol" or "close"),
//     pgtx.cancel.fell_back, pgtx.cancel.latency (s), pgtx.cancel.pid.
//   - "pgtx.breaker.state_change", on the span in the context of the call
//     that changed a circuit breaker's state (the caller's span, outside
//     the transaction's), if one is recording: pgtx.breaker.name (when
//     set), pgtx.breaker.from, pgtx.breaker.to ("closed", "half-open" or
//     "open"), pgtx.breaker.reason, pgtx.breaker.calls,
//     pgtx.breaker.failures, pgtx.breaker.slow. A change noticed outside a
//     call (by Pool.Stats or Pool.BreakerState, open to half-open) has no
//     span to go on: only the metric counts it.
//   - "pgtx.contention.change", on the attempt span whose end led the
//     contention manager to start limiting a label, change its limit or
//     stop: pgtx.label, pgtx.contention.limiting, pgtx.contention.limit,
//     pgtx.contention.previous_limit, pgtx.contention.conflict_ratio.
//
// # Metrics of the Tracer
//
// Every measurement carries the attributes given with WithAttributes, and
// pgtx.label when the call has a label.
//
//   - db.client.operation.duration (s, histogram, the convention's
//     advisory buckets 0.001 to 10): wall time of a Transaction call,
//     backoffs included, with db.system.name="postgresql" and, when it
//     failed, error.type and db.response.status_code (as on the span).
//     otelpgx records its statements under the same name, with
//     db.operation.name; pgtx's transactions have none, and come from
//     [ScopeName].
//   - pgtx.transaction.count {transaction}: calls ended, by pgtx.outcome
//     ("committed" or "failed") and pgtx.class.
//   - pgtx.attempt.count {attempt}: attempts ended, by pgtx.class.
//   - pgtx.retry.count {retry}: attempts followed by another, by the
//     pgtx.class that caused the retry.
//   - pgtx.retry.backoff (s, histogram): the pause before each retry, by
//     pgtx.class.
//   - pgtx.commit_unknown.count {transaction}: calls whose COMMIT outcome
//     is unknown (ambiguous commits pgtx could not resolve).
//   - pgtx.retry_budget.refusal.count {retry}: retries refused by the retry
//     budget, by pgtx.class.
//   - pgtx.cancel.count {cancel}: statements cancelled because their
//     context ended, by pgtx.cancel.outcome, pgtx.cancel.mode and
//     pgtx.cancel.fell_back (no label).
//   - pgtx.cancel.latency (s, histogram): time from a context's end to the
//     cancel's answer, with the attributes of pgtx.cancel.count.
//   - pgtx.breaker.transition.count {transition}: changes of state of
//     circuit breakers, by pgtx.breaker.name (when set), pgtx.breaker.from
//     and pgtx.breaker.to (no label).
//   - pgtx.contention.change.count {change}: changes of a label's limit by
//     the contention manager, by pgtx.contention.limiting.
//   - pgtx.contention.limit {attempt} (gauge): the label's limit after its
//     latest change, 0 once the manager stopped limiting it.
//   - pgtx.commit_lost.count {transaction}: commits calls reported that a
//     later run of the server (a standby promoted after a failover, the
//     server after a restart) provably does not have, by
//     pgtx.commit_lost.status (that run's answer: "aborted", "not yet
//     assigned", "in progress", "committed").
//   - pgtx.replication.asynchronous {1} (gauge): 1 while the pool's server
//     acknowledges commits that no standby has (standbys stream, none is
//     synchronous), 0 once it no longer does; set at each change (no
//     label).
//
// pgtx's own histograms (backoff, cancel latency) use the buckets of
// [pgtx.Histogram], 0.001 to 10 s. Labels should be a small fixed set of
// names (they become metric series): after the first 256 distinct labels,
// further ones are reported in metrics as pgtx.label="_other" (spans keep
// the real label).
//
// # Pool metrics
//
// [RegisterPoolMetrics] observes a pool's [pgtx.Stats] at each collection,
// with db.client.connection.pool.name: db.client.connection.count (by
// db.client.connection.state, "idle" or "used"), db.client.connection.max,
// db.client.connection.pending_requests (pgtx's queue depth, which pgxpool
// does not report: alert on it staying above 0),
// db.client.connection.timeouts, and the pgtx signals without a
// convention: pgtx.pool.queue_full.count, pgtx.pool.in_flight,
// pgtx.pool.oldest_in_flight (s), and for a pool with a circuit breaker
// pgtx.breaker.state, pgtx.breaker.rejection.count and
// pgtx.breaker.open.count. Its documentation gives their units.
//
// The distributions db.client.connection.wait_time and
// db.client.connection.use_time (s, histograms) cannot be observed from
// [pgtx.Stats]: OpenTelemetry has no asynchronous histogram, and the pool's
// own bucket counts cannot be replayed as measurements without inventing
// the values. A [PoolTracer] records them instead, one measurement per
// acquire and per release, from pgxpool's acquire and release events.
package pgtxotel
