// Package pgtxprom exports the statistics of pgtx pools ([pgtx.Pool.Stats])
// as Prometheus metrics.
//
// A [Collector] exports what the pool counts itself, in [pgtx.Stats]: the
// pool, the cancels by outcome, the resolutions of ambiguous COMMITs, the
// commits a later run of the server was asked about, the breaker and the
// contention manager. A [Tracer], set as the pool's [pgtx.Config].Tracer,
// counts what only the tracer events know: how calls end, their attempts,
// the retries by class and their backoff, the retries the budget refused,
// every change of state of the pool's circuit breaker (Stats keeps only
// the state and the openings), the commits a failover lost by label, and
// whether the server acknowledges commits that no standby has. To send the
// same events to a log too, join the Tracer and pgtxslog's with
// [github.com/pgtx-go/pgtx/tracers.Join].
//
// The directory dashboard holds a Grafana dashboard over these metrics
// (dashboard/pgtx.json); a test checks its queries against the names this
// package exports.
//
// A [Collector] reads the statistics of its pool each time it is
// collected; nothing is counted in the transactions' path. Make one per
// pool, as client_golang's collectors.NewDBStatsCollector does for a
// database/sql pool, and register it after creating the pool:
//
//	collector, err := pgtxprom.NewCollector(pool, "main")
//	if err != nil {
//		return err
//	}
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(collector)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Every metric has the label pool, the name given to [NewCollector]. A
// bulkhead (one [pgtx.Pool] per class of work, so that a slow class cannot
// take the connections of the others) is one Collector per pool, each under
// the name of its class (see [NewCollector]'s example).
//
// For a [github.com/pgtx-go/pgtx/bulkhead.Pools], register one for each of
// its Names, with its Pool.
//
// Pool names must be unique in a registry: a second Collector under a name
// already registered is refused. To tell apart the pools of several
// databases or services, wrap the registerer with
// prometheus.WrapRegistererWith and a constant label.
//
// # Metrics
//
// The names below are under the namespace "pgtx" ([WithNamespace] changes
// it).
// Durations are in seconds; counters count from the pool's creation.
//
// The wait for a connection:
//
//   - pgtx_pool_waiters (gauge): the queue depth, acquires of a pool
//     connection in progress now (Transaction and the pool's query methods).
//     Alert on it staying above 0, not on utilisation: a pool whose
//     connections are all in use serves its load as long as nobody waits,
//     and callers that wait mean the pool cannot serve the arrival rate at
//     the current query latency. For example:
//     max_over_time(pgtx_pool_waiters[5m]) > 0 for several minutes.
//   - pgtx_pool_acquire_wait_seconds (histogram): Transaction's waits for a
//     connection, from 1ms to 10s.
//   - pgtx_pool_acquire_timeouts_total (counter): waits ended by
//     [pgtx.Config].AcquireTimeout.
//   - pgtx_pool_queue_full_total (counter): calls refused at once because
//     [pgtx.Config].MaxWaiters callers were waiting (the bulkhead shedding
//     load).
//
// The connections, from pgxpool:
//
//   - pgtx_pool_connections{state="acquired|idle|constructing"} (gauge).
//   - pgtx_pool_max_connections (gauge): the pool's MaxConns.
//   - pgtx_pool_acquires_total (counter): successful acquires.
//   - pgtx_pool_acquire_seconds_total (counter): their total time.
//   - pgtx_pool_empty_acquires_total (counter): successful acquires that
//     waited for a connection to be released or constructed.
//   - pgtx_pool_empty_acquire_wait_seconds_total (counter): the time those
//     acquires waited.
//   - pgtx_pool_canceled_acquires_total (counter): acquires ended by their
//     context.
//   - pgtx_pool_new_connections_total (counter): connections opened.
//   - pgtx_pool_destroyed_connections_total{reason="max_lifetime|max_idle"}
//     (counter): connections closed by MaxConnLifetime or MaxConnIdleTime.
//
// The transactions:
//
//   - pgtx_transactions_started_total (counter): Transaction calls started.
//   - pgtx_transactions_in_flight (gauge): attempts holding a connection now.
//   - pgtx_transaction_oldest_in_flight_seconds (gauge): the age of the
//     oldest of them, 0 when there is none. A value that keeps growing is a
//     transaction that does not end.
//   - pgtx_connection_hold_seconds_total and pgtx_connection_holds_total
//     (counters): the attempts that held a connection and gave it back, and
//     their total hold time (BEGIN to release). The rate of the first over
//     the rate of the second is the mean hold time.
//
// The cancellations of statements whose context ended:
//
//   - pgtx_cancels_total{outcome="signalled|not_found|protocol|closed"}
//     (counter): signalled, the cancel pool's pg_cancel_backend signalled
//     the backend; not_found, the backend had already gone; protocol, a
//     protocol cancel request was sent; closed, the connection was closed
//     instead.
//   - pgtx_cancel_pool_errors_total (counter): cancels the cancel pool could
//     not deliver, which then fell back.
//   - pgtx_cancel_latency_seconds (histogram, 1ms to 10s): the time from a
//     context's end to the cancel's answer.
//   - pgtx_cancel_pool_connections{state="acquired|idle|constructing"} and
//     pgtx_cancel_pool_max_connections (gauges): the cancel pool's
//     connections, only when the pool has one ([pgtx.CancelModePool]).
//
// The resolutions of COMMITs whose connection was lost while they were in
// flight ([pgtx.Config].ResolveTimeout):
//
//   - pgtx_commit_resolutions_total{result="committed|aborted|not_applied|unknown"}
//     (counter): what the server said became of them; unknown, nothing
//     could tell (the call failed with [pgtx.ErrCommitUnknown]).
//   - pgtx_commit_unknown_total{reason="unsupported|elsewhere|restarted|forgotten|unanswered"}
//     (counter): the unknown ones by why ([pgtx.ResolveStats]): a server
//     that cannot be asked, another system or timeline, a server that
//     restarted and could not prove the id older, an id too old, no
//     answer within ResolveTimeout.
//
// The commits calls reported that a later run of the server (a standby
// promoted after a failover, the server after a restart) was asked about
// ([pgtx.Config].RecentCommits):
//
//   - pgtx_failover_commit_checks_total{result="lost|unproven|survived"}
//     (counter): lost, that run provably does not have them; unproven, it
//     said committed of an id it may have given again (or no longer knew
//     the id); survived, proven kept.
//
// The contention manager ([pgtx.Config].Contention), one series per
// [pgtx.Options].Label (label="" for calls without one), absent when it is
// off:
//
//   - pgtx_contention_limit (gauge): how many of the label's attempts the
//     gate lets run at once; 0 while it does not limit them.
//   - pgtx_contention_waiting (gauge): attempts waiting at the gate now.
//   - pgtx_contention_wait_seconds (histogram): the waits at the gate while
//     it limited the label, from 1ms to 10s.
//   - pgtx_contention_attempts_total and pgtx_contention_conflicts_total
//     (counters): the label's attempts, and those that failed with a
//     conflict; their rates' ratio is the conflict ratio the manager acts
//     on.
//
// The circuit breaker, only when the pool has one ([pgtx.Config].Breaker):
//
//   - pgtx_breaker_state{state="closed|half-open|open"} (gauge): 1 for the
//     state the breaker is in, 0 for the others, one series per state as
//     Prometheus has it. Alert on pgtx_breaker_state{state="open"} == 1:
//     calls fail at once with [pgtx.ErrCircuitOpen].
//   - pgtx_breaker_rejected_total (counter): calls refused while it was
//     open.
//   - pgtx_breaker_opens_total (counter): the times it opened.
//
// The pool's metrics cover what pgxpool's own collectors report, under
// Prometheus' naming rules (counters end in _total, times in seconds, one
// metric with a state label rather than one per state), so a dashboard
// built on github.com/IBM/pgxpoolprometheus carries over:
//
//	pgxpoolprometheus                 pgtxprom
//	pgxpool_acquire_count             pgtx_pool_acquires_total
//	pgxpool_acquire_duration_ns       pgtx_pool_acquire_seconds_total (seconds)
//	pgxpool_acquired_conns            pgtx_pool_connections{state="acquired"}
//	pgxpool_canceled_acquire_count    pgtx_pool_canceled_acquires_total
//	pgxpool_constructing_conns        pgtx_pool_connections{state="constructing"}
//	pgxpool_empty_acquire             pgtx_pool_empty_acquires_total
//	pgxpool_idle_conns                pgtx_pool_connections{state="idle"}
//	pgxpool_max_conns                 pgtx_pool_max_connections
//	pgxpool_total_conns               sum without (state) (pgtx_pool_connections)
//
// and adds what pgxpool does not know: the queue depth (pgtx_pool_waiters)
// and the waits and timeouts of Transaction's acquires.
//
// From a [Tracer] (its type's documentation has the details):
// pgtx_transactions_total{label, outcome}, pgtx_transaction_duration_seconds,
// pgtx_transaction_attempts, pgtx_retries_total{label, class},
// pgtx_retry_backoff_seconds_total{label, class},
// pgtx_retry_budget_refusals_total{label},
// pgtx_breaker_transitions_total{breaker, from, to},
// pgtx_commits_lost_total{label, status} and
// pgtx_replication_asynchronous, each with the label pool when
// [WithPoolName] names the pool.
package pgtxprom
