package pgtxotel

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the instrumentation scope of the [Tracer]'s tracer and meter,
// and of the instruments of [RegisterPoolMetrics] and [PoolTracer].
const ScopeName = "github.com/pgtx-go/pgtx/pgtxotel"

// Span, event and attribute names of the pgtx namespace. The conventional
// ones (db.system.name, db.response.status_code, error.type,
// db.client.connection.*) come from semconv.
const (
	spanName           = "pgtx.transaction"
	attemptSpanName    = "pgtx.attempt"
	eventCancel        = "pgtx.cancel"
	eventBreaker       = "pgtx.breaker.state_change"
	eventContention    = "pgtx.contention.change"
	eventSlot          = "pgtx.slot"
	keyLabel           = attribute.Key("pgtx.label")
	keyIsolation       = attribute.Key("pgtx.isolation")
	keyAttemptNumber   = attribute.Key("pgtx.attempt.number")
	keyAttemptCount    = attribute.Key("pgtx.attempt.count")
	keyClass           = attribute.Key("pgtx.class")
	keyOutcome         = attribute.Key("pgtx.outcome")
	keyRetry           = attribute.Key("pgtx.retry")
	keyBackoff         = attribute.Key("pgtx.retry.backoff")
	keyAdmissionWait   = attribute.Key("pgtx.contention.wait")
	keyAdmissionLimit  = attribute.Key("pgtx.contention.limit")
	keyCommitUnknown   = attribute.Key("pgtx.commit_unknown")
	keyBudgetExhausted = attribute.Key("pgtx.retry_budget_exhausted")
	keyCancelOutcome   = attribute.Key("pgtx.cancel.outcome")
	keyCancelMode      = attribute.Key("pgtx.cancel.mode")
	keyCancelFellBack  = attribute.Key("pgtx.cancel.fell_back")
	keyCancelLatency   = attribute.Key("pgtx.cancel.latency")
	keyCancelPID       = attribute.Key("pgtx.cancel.pid")
	keyBreakerName     = attribute.Key("pgtx.breaker.name")
	keyBreakerFrom     = attribute.Key("pgtx.breaker.from")
	keyBreakerTo       = attribute.Key("pgtx.breaker.to")
	keyBreakerReason   = attribute.Key("pgtx.breaker.reason")
	keyBreakerCalls    = attribute.Key("pgtx.breaker.calls")
	keyBreakerFailures = attribute.Key("pgtx.breaker.failures")
	keyBreakerSlow     = attribute.Key("pgtx.breaker.slow")
	keyLimiting        = attribute.Key("pgtx.contention.limiting")
	keyPreviousLimit   = attribute.Key("pgtx.contention.previous_limit")
	keyConflictRatio   = attribute.Key("pgtx.contention.conflict_ratio")
	keyLostStatus      = attribute.Key("pgtx.commit_lost.status")
	keySlotEvent       = attribute.Key("pgtx.slot.event")
	keySlotPool        = attribute.Key("pgtx.slot.pool")
	keySlotLimit       = attribute.Key("pgtx.slot.limit")
	keySlotHeld        = attribute.Key("pgtx.slot.held")
	keySlotWait        = attribute.Key("pgtx.slot.wait")
	outcomeCommitted   = "committed"
	outcomeFailed      = "failed"
)
