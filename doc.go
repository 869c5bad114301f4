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
// # Open a pool
//
// [New] and [NewWithConfig] build a [Pool]. Its query methods (Exec, Query,
// QueryRow, SendBatch, CopyFrom) cancel a statement on the server when its
// context ends, as [Transaction] does; it has no Begin or Acquire, and
// [Pool.Pgxpool] is the one documented way around its guarantees. Start
// from [ParseConfig], or adopt a *pgxpool.Config made elsewhere as
// &pgtx.Config{Config: poolConfig}, and change fields:
//
//	cfg, err := pgtx.ParseConfig(os.Getenv("DATABASE_URL"))
//	cfg.MaxConns = 20
//	cfg.StatementTimeout = 2 * time.Second
//	pool, err := pgtx.NewWithConfig(ctx, cfg)
//	defer pool.Close()
//
// # One rule for every setting
//
// In [Config], [RetryConfig], [BreakerConfig],
// [ContentionConfig], [Options] and
// the config types of the sub-packages:
//
//   - a zero value means the default, which each field's doc states;
//   - a negative value switches the setting off: pgtx applies no such limit
//     of its own, sends no such parameter, makes no such retry or pause;
//     the field's doc says what remains (the caller's context, the server's
//     setting);
//   - an optional feature ([Config].Breaker, [Config].Tracer) is off while
//     nil.
//
// Nothing is switched off any other way, and no negative value is an error.
//
// # Run a transaction
//
// [Transaction] takes an [Isolation] ([ReadCommitted], [RepeatableRead],
// [Serializable]; the zero value is refused). [TransactionWithOptions] adds
// [Options]: read only, deferrable, a statement timeout for this transaction
// (sent with BEGIN, no extra round trip), per-call retry caps, the retry of
// unique violations under SERIALIZABLE, and a label for traces.
// [TransactionValue] is the form whose fn returns a value. fn receives a
// [pgx.Tx], so sqlc's Queries.WithTx(tx) works unchanged; its Commit and
// Rollback are refused (Transaction ends the transaction), and it may run
// more than once: work outside the transaction belongs in [AfterCommit],
// which runs it once, after the commit. [Attempt] says which attempt fn is
// running. A Transaction called with fn's ctx on the same pool is refused
// at once with an error matching [ErrInvalidArgument].
//
// When ctx has a deadline, the server gets it too: the transaction's
// statement_timeout becomes the time left (plus a small margin, never above
// the one in force), sent with BEGIN, so the server stops the work at the
// deadline even if this process dies or its cancel is lost.
//
// # What is retried
//
// The whole transaction (a new BEGIN, fn again, a new COMMIT) runs again after
// a serialization failure (40001) or a deadlock (40P01), after a short pause
// with full jitter, at most [RetryConfig].MaxRetries times (default 10). It
// also runs again, on a fresh connection, when the connection was lost before
// COMMIT was sent. Overload errors (53300 too_many_connections, 57P03
// cannot_connect_now, the pooler equivalents) are retried at most
// [RetryConfig].MaxAdaptiveRetries times (default 2) with jitter *
// min(10s, 100ms * 2^attempt), as the Client Backpressure specification of
// MongoDB's drivers prescribes; once one has been seen, that cap applies to
// every later retry of the call (those after an unavailable server, below,
// excepted), but a kind of retry the caller switched off stays off. A retry whose pause would end past the context's deadline is
// not attempted.
//
// A server that cannot be connected to ([ClassUnavailable]: refused while it
// restarts, no read-write host while a standby is promoted) is expected back
// within seconds: it is retried with the same pauses until the context's
// deadline, or until [RetryConfig].UnavailableTimeout (default 15s) after
// the call's first such error when that comes first, and no call ends early
// because a full pause would not fit: the pause is cut to half the time
// left, and near the deadline the call waits for it and ends with an error
// matching context.DeadlineExceeded. These retries are capped by neither
// MaxRetries nor MaxAdaptiveRetries, and do not cap the call's other
// retries.
//
// Overload, unavailable-server and lost-connection retries of the whole pool
// are bounded by a retry budget ([RetryConfig].BudgetRatio). A call that ends after retries (or with a
// retry refused) returns a [*RetryError] saying how many attempts it made
// and why it stopped; one that ends on a server it could not connect to
// says that first ("pgtx: the server is unreachable: gave up after 13
// attempts in 15s (UnavailableTimeout 15s): ..."), however it ended.
//
// # Hot rows
//
// When many callers update the same few rows, retrying each conflict after
// a pause wastes attempts and leaves the server idle. The contention
// manager ([Config].Contention, on by default) watches, per
// [Options].Label, the share of attempts that fail with a conflict; above
// [ContentionConfig].Threshold it admits only as many of the label's
// attempts at once as commit most, lets the rest wait in the client
// (oldest call first, holding no connection), and runs a conflict retry as
// soon as a running attempt ends instead of after a pause. A transaction
// that does not conflict pays four atomic additions. [Stats].Contention shows
// each label's limit and waits; a [ContentionTracer] is told of every
// change.
//
// # What is never retried
//
// Timeouts (57014 query_canceled, 25P03, 25P04, context errors,
// [ErrAcquireTimeout], [ErrQueueFull]): what took too long takes too long
// again. A COMMIT whose connection was lost while it was in flight is never
// run again blindly: pgtx asks the server what became of it
// ([Config].ResolveTimeout), and runs it again only if the server says it
// did not commit. An answer is used only when it is about this
// transaction: a server that restarted, recovered from a crash or was
// promoted since the transaction began may have given its id to another
// transaction, so there "committed" counts only when the server's latest
// checkpoint proves the id older than that change, while "aborted" and an
// id not yet given mean the transaction is not in the history the server
// kept. When nothing could know, the error matches [ErrCommitUnknown] and
// says why ([ResolveStats] counts the reasons): the transaction may have
// committed; it means only that. Constraint, syntax, data and authentication errors, a database,
// host or socket that does not exist, the caller's own errors and misuse,
// and errors wrapped with [NonRetryable].
//
// # When the context ends
//
// The running statement is cancelled on the server (pg_cancel_backend over a
// small cancel pool, matched by pid and backend_start), its locks are
// released at once, and the connection is kept; it is not used again until
// the cancel is confirmed finished, and a connection whose cancel cannot be
// confirmed is destroyed, so a late cancel never reaches the next borrower.
// Behind a pooler such as PgBouncer each connection is cancelled with the
// protocol's cancel request instead. This holds for Transaction and for the
// Pool's query methods. See [CancelMode] for the modes and their privileges.
//
// # Bounded waits
//
// Every connection starts with statement_timeout (default 5s) and
// idle_in_transaction_session_timeout (default 10s) as session parameters, so
// plain pool queries have the server-side limit too. The wait for a pool
// connection is bounded by [Config].AcquireTimeout (default 2s) and, with
// [Config].MaxWaiters, by the length of the queue. COMMIT and ROLLBACK run on
// contexts the caller's cancellation cannot interrupt, bounded by their own
// timeouts. A cancel that does not take effect within [Config].CancelGrace
// closes the connection.
//
// # Errors
//
// Errors keep their identity: errors.As finds the last *pgconn.PgError,
// errors.Is finds the caller's own errors, and errors.Is(err, ctx.Err())
// holds when the context ended the call. [Classify] tells what pgtx makes
// of an error; SQLSTATE names are those of github.com/jackc/pgerrcode.
//
// # Optional databases, bulkheads, storms
//
// [Config].Breaker puts a circuit breaker (failures, failure ratio,
// slow-call ratio) in front of a pool used as an optional dependency. The
// sub-packages build on this package's API: replica reads from replicas
// behind their breakers with a fallback to the primary, bulkhead gives each
// operation class a pool of its own, and storm tells a timeout storm from a
// traffic spike from two [Pool.Stats] snapshots ([Stats].Waiting is the
// queue depth pgxpool does not report).
//
// # Observability
//
// [Config].Tracer, a [TransactionTracer], receives an event at the start and
// end of every call and every attempt, and, when it implements them, of
// every cancel ([CancelTracer]), breaker state change ([BreakerTracer]) and
// change of a contention limit ([ContentionTracer]).
// pgtxslog adapts them to log/slog; the modules pgtxotel and pgtxprom adapt
// them to OpenTelemetry and Prometheus.
package pgtx
