// Package pgtxotel reports pgtx transactions as OpenTelemetry spans and
// metrics.
//
// A [Tracer] adapts every tracer interface of pgtx:
// [pgtx.TransactionTracer], [pgtx.CancelTracer] and [pgtx.BreakerTracer].
// Set it as the pool's tracer, and it receives the events of the pool's
// calls, cancels and circuit breaker:
//
//	tr, err := pgtxotel.New()
//	if err != nil { ... }
//	cfg, err := pgtx.ParseConfig(connString)
//	if err != nil { ... }
//	cfg.Tracer = tr
//	pool, err := pgtx.NewWithConfig(ctx, cfg)
//
// Every [pgtx.Transaction] call then becomes one span, "pgtx.transaction" (or
// "pgtx.transaction <label>" when [pgtx.Options].Label is set), a child of the
// span in the caller's context. Its context is the one fn receives, so the
// spans of pgx's own tracers, if any, nest under it. Each attempt is a
// "pgtx.attempt" event on that span rather than a span of its own: a
// transaction retried ten times is still one span.
//
// # Spans
//
// The span, of kind client, has the attributes db.system.name
// ("postgresql"), pgtx.isolation, pgtx.label (when set) and those given
// with WithAttributes. When the call ends it gets pgtx.attempts; when it
// failed, the status Error with the error's message, the error recorded as
// an exception event, error.type (the pgtx.Class: "conflict", "overload",
// "connection_lost", "ambiguous", "timeout" or "permanent"),
// db.response.status_code (the SQLSTATE, when there is one),
// pgtx.commit_unknown=true when the error matches [pgtx.ErrCommitUnknown]
// and pgtx.retry_budget_exhausted=true when it matches
// [pgtx.ErrRetryBudgetExhausted]. A call that committed leaves the status
// Unset, as OpenTelemetry asks of instrumentation libraries.
//
// Events on the span:
//
//   - "pgtx.attempt", one per attempt: pgtx.attempt (from 1), pgtx.class
//     ("none" when it committed), pgtx.retry, pgtx.backoff_ms,
//     pgtx.duration_ms and, when the attempt failed, error.type (its class),
//     db.response.status_code (its SQLSTATE, when any),
//     pgtx.commit_unknown and pgtx.retry_budget_exhausted (when true).
//   - "pgtx.retry_budget_exhausted", before the "pgtx.attempt" event of the
//     attempt whose retry the pool's retry budget refused: pgtx.attempt,
//     pgtx.class, db.response.status_code.
//   - "pgtx.cancel", on the span of the cancelled statement's context (the
//     transaction's, or a pgx tracer's query span), if it is still recording
//     when the cancel finishes: pgtx.cancel.outcome ("signalled",
//     "not_found", "protocol" or "closed"), pgtx.cancel.mode (the pool's
//     [pgtx.CancelMode]: "pool", "protocol" or "close"), pgtx.cancel.fell_back, pgtx.cancel.latency_ms,
//     pgtx.cancel.pid.
//   - "pgtx.breaker.state_change", on the span in the context of the call
//     that changed a circuit breaker's state (the caller's span, outside
//     the transaction's), if one is recording: pgtx.breaker.name (when
//     set), pgtx.breaker.from, pgtx.breaker.to ("closed", "half-open" or
//     "open"), pgtx.breaker.reason, pgtx.breaker.calls,
//     pgtx.breaker.failures, pgtx.breaker.slow. A change noticed outside a
//     call (by Pool.Stats or Pool.BreakerState, open to half-open) has no
//     span to go on: only the metric counts it.
//
// # Metrics
//
// All durations are in seconds. Every measurement carries the attributes
// given with WithAttributes, and the transaction metrics carry pgtx.label
// when a label is set.
//
//   - pgtx.transactions {transaction}: calls ended, by pgtx.outcome
//     ("committed" or "failed") and pgtx.class.
//   - pgtx.transaction.duration (s): wall time of a call, backoffs included,
//     by pgtx.outcome and pgtx.class.
//   - pgtx.attempts {attempt}: attempts ended, by pgtx.class.
//   - pgtx.retries {retry}: attempts followed by another, by the pgtx.class
//     that caused the retry.
//   - pgtx.backoff (s): the pause before each retry, by pgtx.class.
//   - pgtx.commit_unknown {transaction}: calls whose COMMIT outcome is
//     unknown.
//   - pgtx.retry_budget.exhausted {retry}: retries refused by the retry
//     budget, by pgtx.class.
//   - pgtx.cancels {cancel}: statements cancelled because their context
//     ended, by pgtx.cancel.outcome, pgtx.cancel.mode and
//     pgtx.cancel.fell_back.
//   - pgtx.cancel.latency (s): time from a context's end to the cancel's
//     answer, with the attributes of pgtx.cancels.
//   - pgtx.breaker.transitions {transition}: changes of state of circuit
//     breakers, by pgtx.breaker.name (when set), pgtx.breaker.from and
//     pgtx.breaker.to.
//
// Labels should be a small fixed set of names (they become metric series):
// after the first 256 distinct labels, further ones are reported in metrics
// as pgtx.label="_other" (spans keep the real label).
//
// # Pool metrics
//
// [RegisterPoolMetrics] adds observable instruments over a pool's
// [pgtx.Stats]: the queue depth (pgtx.pool.waiters — alert on it staying
// above 0), connections by state, acquire timeouts, in-flight transactions
// and the age of the oldest, and the circuit breaker's state.
package pgtxotel
