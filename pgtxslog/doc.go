// Package pgtxslog logs pgtx's events with log/slog.
//
// A [Tracer], set as [pgtx.Config].Tracer, logs what is worth a look:
// retries, failed calls, ambiguous COMMITs, retry budget refusals,
// cancelled statements, the circuit breaker's changes, the contention
// manager's limits, commits a failover lost, a server that acknowledges
// commits no standby has, and connects refused for lack of connection
// slots. Each kind of line is an [Event] with a default
// level chosen by severity: a call's own error (a constraint violation,
// the caller's error) goes to its caller and is logged at Debug; what the
// operator must act on (a COMMIT whose outcome is unknown, a lost commit,
// a server out of disk) at Error. [WithLevels] changes a kind's level, and
// [LevelOff] silences it.
//
//	cfg.Tracer = pgtxslog.NewTracer(pgtxslog.WithLogger(logger))
//
// A line's error is its attribute "err"; every other attribute is in the
// group "pgtx", with plain keys (label, attempt, class, sqlstate,
// backoff...). Lines are written with [slog.Logger.LogAttrs] and the
// context pgtx passes, so a handler can take a trace id from it; a line
// whose level is off or disabled is not built. [Stats] and [Diagnosis] log
// a pool's statistics and a storm diagnosis as structured values.
//
// The repository's docs/observability.md lists every kind of line, its
// level and its attributes.
package pgtxslog
