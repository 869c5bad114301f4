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
// # What is retried
//
// The whole transaction (a new BEGIN, fn again, a new COMMIT) runs again after
// a serialization failure (40001) or a deadlock (40P01), after a short pause
// with full jitter, at most RetryPolicy.MaxRetries times (default 10). It
// also runs again, on a fresh connection, when the connection was lost before
// COMMIT was sent. Overload errors (53300 too_many_connections, 57P03
// cannot_connect_now, the pooler equivalents, and a refused connection while
// the server restarts) are retried at most
// RetryPolicy.MaxAdaptiveRetries times (default 2) with
// jitter * min(10s, 100ms * 2^attempt); once one has been seen, that cap
// applies to every later retry of the call. A retry whose pause would end
// past the context's deadline is not attempted.
//
// # What is never retried
//
// Timeouts (57014 query_canceled, 25P03, 25P04, context errors,
// ErrAcquireTimeout): what took too long takes too long again. A COMMIT whose
// connection was lost while it was in flight: the error matches
// ErrCommitUnknown, because the transaction may have committed. Constraint,
// syntax and data errors, the caller's own errors, and errors wrapped with
// NonRetryable.
//
// # Bounded waits
//
// Every connection starts with statement_timeout (default 5s) and
// idle_in_transaction_session_timeout (default 10s) as session parameters, so
// plain pool queries have the server-side limit too. The wait for a pool
// connection is bounded by Config.AcquireTimeout (default 2s). COMMIT and
// ROLLBACK run on contexts the caller's cancellation cannot interrupt,
// bounded by their own timeouts.
//
// # Errors
//
// Errors keep their identity: errors.As finds the last *pgconn.PgError,
// errors.Is finds the caller's own errors, and errors.Is(err, ctx.Err())
// holds when the context ended the call. Classify, SQLState and IsRetryable
// tell what pgtx makes of an error.
//
// Pool.Begin, BeginTx and Acquire on the embedded pgxpool.Pool bypass
// Transaction's guarantees.
package pgtx
