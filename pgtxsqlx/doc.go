// Package pgtxsqlx gives sqlx's users pgtx's guarantees.
//
// [Open] and [OpenDB] return a *sqlx.DB over a *sql.DB of
// [github.com/pgtx-go/pgtx/pgtxsql], with sqlx's bind type for PostgreSQL
// ($1, $2...). [Transaction] runs fn with a *sqlx.Tx in a transaction of
// that *sqlx.DB, with the contract of [pgtx.Transaction]:
//
//	err := pgtxsqlx.Transaction(ctx, db, pgtx.Serializable, func(ctx context.Context, tx *sqlx.Tx) error {
//		var balance int
//		if err := tx.GetContext(ctx, &balance, "select balance from accounts where id = $1", 1); err != nil {
//			return err
//		}
//		_, err := tx.ExecContext(ctx, "update accounts set balance = $1 where id = $2", balance-10, 1)
//		return err
//	})
//
// The whole transaction runs again on a conflict, a lost connection, an
// overload or a failover; when ctx ends, the running statement is
// cancelled on the server and the connection kept; a COMMIT whose answer
// was lost is resolved, never guessed. fn must not call the *sqlx.Tx's
// Commit or Rollback: Transaction commits when fn returns nil.
//
// The repository's docs/database-sql.md is the guide.
package pgtxsqlx
