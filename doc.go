// Package pgtx runs PostgreSQL transactions safely under contention,
// overload and cancellation, on top of pgx v5 and pgxpool.
//
// One call does what teams otherwise write by hand and get subtly wrong:
//
//	err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, "update accounts set balance = balance - $1 where id = $2", 10, 1)
//		return err
//	})
//
// [New] and [NewWithConfig] build a [Pool]; start from [ParseConfig], or
// adopt a *pgxpool.Config made elsewhere as &pgtx.Config{Config: poolConfig}.
// The Pool's query methods cancel a statement on the server when its
// context ends, as [Transaction] does; it has no Begin or Acquire, and
// [Pool.Pgxpool] is the one way around its guarantees.
//
// # One rule for every setting
//
// In [Config], [RetryConfig], [BreakerConfig], [ContentionConfig], [Options]
// and the config types of the sub-packages, a zero value means the default
// the field's doc states, a negative value switches the setting off (the
// field's doc says what remains: the caller's context, the server's
// setting), and an optional feature ([Config].Breaker, [Config].Tracer) is
// off while nil. Nothing is switched off any other way, and no negative
// value is an error.
//
// # What a call guarantees
//
//   - A serialization failure (40001) or a deadlock (40P01) runs the whole
//     transaction again after a short jittered pause; so does a connection
//     lost before COMMIT. Overload is retried with the Client Backpressure
//     specification's exponential backoff and full jitter, and a server
//     that cannot be reached while it restarts or fails over is retried
//     until the deadline or [RetryConfig].UnavailableTimeout. A retry
//     budget bounds the retries of the whole pool, and no pause ends past
//     the context's deadline. A call that made several attempts returns a
//     [*RetryError] that says why it stopped.
//   - When ctx ends, the running statement is cancelled on the server, and
//     the connection is not reused until that cancel is confirmed finished
//     ([CancelMode]): a late cancel never reaches the next borrower.
//   - A COMMIT whose answer was lost is resolved by asking the server
//     ([Config].ResolveTimeout), never with another transaction's answer:
//     a nil error always means committed. When nothing could know, the
//     error matches [ErrCommitUnknown].
//   - Every wait is bounded: the acquire ([Config].AcquireTimeout,
//     [Config].MaxWaiters), every statement (statement_timeout, and the
//     context's deadline sent to the server), COMMIT and ROLLBACK (their
//     own timeouts, since the caller's cancellation cannot interrupt them).
//   - Errors keep their identity: errors.As finds the *pgconn.PgError,
//     errors.Is finds the caller's own errors and ctx.Err() when the
//     context ended the call. [Classify] tells what pgtx makes of an error.
//
// Around it: the contention manager ([Config].Contention) for hot rows, a
// circuit breaker ([Config].Breaker) for a database the application can do
// without, [Pool.Stats] with the queue depth pgxpool does not report, the
// commits a failover lost ([Config].RecentCommits), and tracer interfaces
// ([TransactionTracer], [CancelTracer], [BreakerTracer],
// [ContentionTracer], and Tracer of the failover package, which holds the
// failover events' types). The sub-packages build on this package's API:
// replica, bulkhead, storm, tracers and pgtxslog; the modules pgtxotel,
// pgtxprom and pgtxtest adapt pgtx to OpenTelemetry, Prometheus and
// integration tests.
//
// # Guides
//
// The repository's docs directory has one guide per topic, each with its
// reasons and measurements: retries.md, overload.md, hot-rows.md,
// cancellation.md, ambiguous-commits.md, configuration.md, poolers.md,
// replicas-breakers-bulkheads.md, observability.md, testing.md,
// migrating.md and troubleshooting.md.
package pgtx
