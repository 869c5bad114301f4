// Package pgtxslog logs the events of pgtx with log/slog.
//
// A [Tracer] adapts every tracer interface of pgtx:
// [pgtx.TransactionTracer], [pgtx.CancelTracer], [pgtx.BreakerTracer],
// [pgtx.ContentionTracer] and [failover.Tracer]. Set it as the Config's
// tracer, and it receives the events of the pool's calls, cancels, circuit
// breaker, contention manager and failovers:
//
//	cfg, err := pgtx.ParseConfig(os.Getenv("DATABASE_URL"))
//	if err != nil {
//		return err
//	}
//	cfg.Tracer = pgtxslog.NewTracer(pgtxslog.WithLogger(logger))
//	pool, err := pgtx.NewWithConfig(ctx, cfg)
//
// # What is logged
//
// By default only what is worth a look is logged: retries, failed calls,
// ambiguous COMMITs, retry budget refusals, cancelled statements, the
// circuit breaker's changes of state, the contention manager's limits,
// commits a failover lost and a server that acknowledges commits no
// standby has.
// Each kind of line is an [Event] with a default level, chosen by
// severity:
//
//	Event                Line                                             Message                        Default
//	RetryConflict        retry after 40001 / 40P01 (ClassConflict)        retrying transaction           Debug
//	RetryOverload        retry after an overload error (ClassOverload) or
//	                     an unreachable server (ClassUnavailable)         retrying transaction           Warn
//	RetryConnectionLost  retry after a lost connection                    retrying transaction           Warn
//	BudgetExhausted      retry refused by the retry budget                retry budget exhausted         Warn
//	CommitUnknown        COMMIT outcome unknown (ErrCommitUnknown)        commit outcome unknown         Error
//	FailedRetryable      failed: retries of a retryable class ran out     transaction failed             Warn
//	FailedTimeout        failed: timeout (57014, 25P03, 25P04, deadline,
//	                     ErrAcquireTimeout)                               transaction failed             Warn
//	FailedCanceled       failed: the caller cancelled (context.Canceled)  transaction failed             Debug
//	FailedServer         failed: the server is in trouble (SQLSTATE
//	                     class 53 but 53300, 58, XX)                      transaction failed             Error
//	FailedPermanent      failed: any other error (constraints, data
//	                     errors, the caller's own errors, NonRetryable)   transaction failed             Debug
//	Cancel               statement cancelled as configured                statement cancelled            Debug
//	CancelFallback       statement cancel fell back (FellBack, or the
//	                     connection closed outside CancelModeClose)       statement cancelled            Warn
//	BreakerOpened        circuit breaker opened                           circuit breaker state changed  Warn
//	BreakerChanged       circuit breaker went half-open or closed         circuit breaker state changed  Info
//	ContentionSwitched   the contention manager starts or stops limiting
//	                     a label                                          contention limit changed       Info
//	ContentionChanged    the contention manager changes a label's limit   contention limit changed       Debug
//	CommitLost           a reported commit a later run of the server
//	                     provably does not have (a failover lost it)      commit lost                    Error
//	ReplicationAsync     the server acknowledges commits no standby has   replication changed            Warn
//	ReplicationChanged   it no longer does                                replication changed            Info
//	Committed            a call committed                                 transaction committed          off
//	Attempt              the last attempt of a call                       attempt finished               off
//
// An error that ends a call is returned to its caller, which decides what it
// means; so a constraint violation, a data error or the caller's own error is
// logged at Debug only, while what the operator must know about (a COMMIT
// that may or may not have happened, a reported commit a failover lost, a
// server out of disk or memory) is logged at Error. A call refused by the
// retry budget logs the refusal only, not a second "transaction failed"
// line. The contention manager probes
// for the limit that commits most, so its changes of limit come often and
// are logged at Debug; it starting or stopping to limit a label is logged
// at Info.
//
// [WithLevels] is the one way to choose levels: it maps a kind to its
// level, and [LevelOff] silences it. Enabling the committed or attempt
// lines is giving them a level:
//
//	pgtxslog.NewTracer(pgtxslog.WithLogger(logger), pgtxslog.WithLevels(map[pgtxslog.Event]slog.Leveler{
//		pgtxslog.Committed:     slog.LevelInfo,
//		pgtxslog.RetryConflict: pgtxslog.LevelOff,
//	}))
//
// # Attributes
//
// A line's error is its attribute "err", the key slog's conventions give
// it. Every other attribute is in one group, "pgtx", with plain keys; so a
// JSON handler writes
//
//	{"level":"WARN","msg":"retrying transaction","err":"ERROR: sorry, too many clients already (SQLSTATE 53300)",
//	 "pgtx":{"label":"transfer","isolation":"SERIALIZABLE","attempt":1,"class":"overload","sqlstate":"53300","backoff":250000000,"duration":1200000}}
//
// and a logger's own group (Logger.WithGroup) holds both. The keys:
//
//	label                           the call's pgtx.Options.Label; absent when empty
//	isolation                       the isolation level, as pgtx.Isolation.String
//	attempt, attempts               the number of an attempt (from 1), the attempts of a call
//	class, sqlstate                 the error's pgtx.Class; its SQLSTATE, absent when there is none
//	backoff                         the pause before the next attempt
//	duration                        the wall time of an attempt (retry and attempt lines) or of a call
//	admission_wait, limit           the wait at the contention manager's gate and the limit the
//	                                attempt ran under; absent when the gate did not limit it
//	pid                             the backend whose statement was cancelled
//	cancel_mode                     the pool's pgtx.CancelMode: "pool", "protocol" or "close"
//	cancel_outcome                  "signalled", "not_found", "protocol" or "closed"
//	fell_back                       whether the cancel pool failed and a fallback was used
//	latency                         the time from the context's end to the cancel's answer
//	breaker                         the breaker's pgtx.BreakerConfig.Name; absent when empty
//	from, to, reason                the states a breaker left and entered, and why
//	calls, failures, slow           the breaker window's counts at the change
//	label, limiting, limit,         a contention change: the label (absent when empty), whether the
//	previous, conflict_ratio        gate limits from now on, the new and the old limit, and the
//	                                share of conflicts that led to the change
//	label, xid, committed_at,       a lost commit: the call's label (absent when empty), the
//	timeline, new_timeline, status  transaction's id, when the call learned of its commit, the
//	                                timeline that acknowledged it and the one that lacks it, and
//	                                that one's answer about the id
//	asynchronous, standbys,         replication: whether the server acknowledges commits no standby
//	synchronous_standby_names,      has, the standbys streaming from it, its settings, and its
//	synchronous_commit, timeline    timeline
//
// [Stats] and [Diagnosis] log a pool's statistics and a [storm.Diagnosis]
// the same way, as one attribute whose value is a group.
//
// # Cost
//
// Every line is written with [slog.Logger.LogAttrs] and the context pgtx
// passes to the hook, so a handler can take a trace id from it. The
// handler's Enabled is asked first: a line that is off or whose level is
// disabled costs no allocation. [Tracer.TraceAttemptStart] and
// [Tracer.TraceTransactionStart] return their context unchanged and do
// nothing else.
package pgtxslog
