// Package pgtxgorm gives GORM's users pgtx's guarantees.
//
// [Open] and [Dialector] make a *gorm.DB whose connections are those of a
// [pgtx.Pool], through [github.com/pgtx-go/pgtx/pgtxsql] and GORM's
// PostgreSQL driver. [Transaction] is GORM's db.Transaction with the
// contract of [pgtx.Transaction]:
//
//	err := pgtxgorm.Transaction(ctx, db, pgtx.Serializable, func(tx *gorm.DB) error {
//		return tx.Model(&Account{}).Where("id = ?", 1).
//			Update("balance", gorm.Expr("balance - ?", 10)).Error
//	})
//
// Where GORM's Transaction runs fn once, pgtxgorm's runs the whole
// transaction again on a conflict, a lost connection, an overload or a
// failover; when ctx ends, the running statement is cancelled on the
// server and the connection kept; a COMMIT whose answer was lost is
// resolved, never guessed. fn's tx carries the attempt's context; fn must
// not call its Commit or Rollback (tx.Transaction inside fn makes a
// savepoint, as in GORM).
//
// The repository's docs/database-sql.md is the guide.
package pgtxgorm
