// Package pgtxsql gives database/sql's users pgtx's guarantees.
//
// [Open] and [OpenDB] return a *sql.DB whose connections are those of a
// [pgtx.Pool], with pgx's types underneath as in pgx's stdlib: sqlx, GORM,
// Bun and ent take it as they take any *sql.DB. [Transaction] runs a
// function in a transaction of that *sql.DB with the contract of
// [pgtx.Transaction]:
//
//	err := pgtxsql.Transaction(ctx, db, pgtx.Serializable, func(ctx context.Context, tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, "update accounts set balance = balance - $1 where id = $2", 10, 1)
//		return err
//	})
//
// What a call guarantees:
//
//   - A conflict (40001, 40P01), a connection lost before COMMIT, an
//     overload and a server restarting or failing over run the whole
//     transaction again, within the context's deadline and the pool's
//     [pgtx.RetryConfig].
//   - When ctx ends, the running statement is cancelled on the server and
//     the connection is kept, never closed as database/sql closes a
//     connection whose transaction's context ended; it is not used again
//     until the cancel is confirmed finished.
//   - A COMMIT whose answer was lost is resolved by asking the server: a nil
//     error always means committed, and when nothing could know, the error
//     matches [pgtx.ErrCommitUnknown].
//   - The deadline goes to the server with BEGIN, which travels with the
//     transaction's first statement: a one-statement transaction costs two
//     round trips, where database/sql's own costs three. A first query
//     whose text asks for result formats (a column of a type pgx's stdlib
//     wants as text but pgx would get in binary, as numeric or uuid) sends
//     BEGIN alone, as database/sql does; so does any first query the first
//     time its text is seen.
//
// [Run] is Transaction for a library that begins its transactions itself
// (sqlx's BeginTxx, GORM's Begin, Bun's BeginTx, ent's Client.Tx): its
// begin function's BeginTx on the *sql.DB, with the context Run gives it,
// returns the attempt's transaction. The modules pgtxsqlx and pgtxgorm
// build on it.
//
// A transaction begun with db.BeginTx outside Transaction and Run runs once,
// as database/sql's own; its statements and the plain ones are still
// cancelled on the server when their context ends. [Pool] returns the
// [pgtx.Pool] underneath, whose [pgtx.Pool.Stats] the telemetry adapters
// read.
//
// The repository's docs/database-sql.md is the guide for database/sql,
// sqlx, GORM, Bun and ent.
package pgtxsql
