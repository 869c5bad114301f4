// Package pgtx runs PostgreSQL transactions safely under contention,
// overload and cancellation, on top of pgx v5 and pgxpool:
//
//	err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, "update accounts set balance = balance - $1 where id = $2", 10, 1)
//		return err
//	})
//
// [New] and [NewWithConfig] build a [Pool] from a [Config]; in every config
// of pgtx, a zero field means the default its doc states and a negative one
// switches it off. The Pool has no Begin or Acquire: [Pool.Pgxpool] is the
// one way around its guarantees.
//
// # What a call guarantees
//
//   - A conflict (40001, 40P01), a connection lost before COMMIT, an
//     overload and a server restarting or failing over run the whole
//     transaction again, within the context's deadline, the pool's
//     [RetryConfig] and a retry budget; a [*RetryError] says why it stopped.
//   - When ctx ends, the running statement is cancelled on the server
//     ([CancelMode]), and a late cancel never reaches the next borrower.
//   - A COMMIT whose answer was lost is resolved by asking the server: a nil
//     error always means committed, and when nothing could know, the error
//     matches [ErrCommitUnknown].
//   - Every wait is bounded: the acquire, every statement, COMMIT and
//     ROLLBACK.
//   - Errors keep their identity for errors.As and errors.Is; [Classify]
//     tells what pgtx makes of one.
//
// Around it: the contention manager for hot rows, a circuit breaker,
// [Pool.Stats], the commits a failover lost, and tracer interfaces
// ([TransactionTracer] and the optional ones). The sub-packages deferred
// (statements fn does not wait for), replica, bulkhead, storm, tracers and
// pgtxslog, and the modules pgtxotel,
// pgtxprom, pgtxtest, pgtxsql (database/sql, Bun, ent), pgtxsqlx (sqlx)
// and pgtxgorm (GORM), build on this package's API.
//
// # Guides
//
// One guide per topic, each with its reasons and measurements:
// [retries], [overload], [hot rows], [cancellation], [ambiguous commits],
// [lost commits], [configuration], [poolers],
// [replicas, breakers and bulkheads], [observability], [testing],
// [database/sql and ORMs], [migrating] and [troubleshooting].
//
// [retries]: https://github.com/pgtx-go/pgtx/blob/main/docs/retries.md
// [overload]: https://github.com/pgtx-go/pgtx/blob/main/docs/overload.md
// [hot rows]: https://github.com/pgtx-go/pgtx/blob/main/docs/hot-rows.md
// [cancellation]: https://github.com/pgtx-go/pgtx/blob/main/docs/cancellation.md
// [ambiguous commits]: https://github.com/pgtx-go/pgtx/blob/main/docs/ambiguous-commits.md
// [lost commits]: https://github.com/pgtx-go/pgtx/blob/main/docs/lost-commits.md
// [configuration]: https://github.com/pgtx-go/pgtx/blob/main/docs/configuration.md
// [poolers]: https://github.com/pgtx-go/pgtx/blob/main/docs/poolers.md
// [replicas, breakers and bulkheads]: https://github.com/pgtx-go/pgtx/blob/main/docs/replicas-breakers-bulkheads.md
// [observability]: https://github.com/pgtx-go/pgtx/blob/main/docs/observability.md
// [testing]: https://github.com/pgtx-go/pgtx/blob/main/docs/testing.md
// [database/sql and ORMs]: https://github.com/pgtx-go/pgtx/blob/main/docs/database-sql.md
// [migrating]: https://github.com/pgtx-go/pgtx/blob/main/docs/migrating.md
// [troubleshooting]: https://github.com/pgtx-go/pgtx/blob/main/docs/troubleshooting.md
package pgtx
