package pgtxsqlx

import (
	"context"

	"github.com/jmoiron/sqlx"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxsql"
)

// driverName is the name sqlx knows PostgreSQL's bind type ($1) by.
const driverName = "pgx"

// OpenDB returns a *sqlx.DB over [pgtxsql.OpenDB] of pool. Closing it does
// not close pool.
func OpenDB(pool *pgtx.Pool) *sqlx.DB {
	return sqlx.NewDb(pgtxsql.OpenDB(pool), driverName)
}

// Open opens a [pgtx.Pool] for connString and returns a *sqlx.DB over it, as
// [pgtxsql.Open] does; closing the *sqlx.DB closes the pool.
func Open(ctx context.Context, connString string) (*sqlx.DB, error) {
	db, err := pgtxsql.Open(ctx, connString)
	if err != nil {
		return nil, err
	}
	return sqlx.NewDb(db, driverName), nil
}

// Transaction runs fn in a transaction of db and commits it when fn
// returns nil, with the contract of [pgtx.Transaction] and
// [pgtxsql.Transaction]. db must be over a *sql.DB of [pgtxsql.Open] or
// [pgtxsql.OpenDB], as [Open] and [OpenDB] make: a nil or empty *sqlx.DB,
// or one over another *sql.DB, is an error matching
// [pgtx.ErrInvalidArgument]. It is [TransactionWithOptions] with the zero
// [pgtx.Options].
//
// fn's *sqlx.Tx is of this attempt only; fn must not call its Commit or
// Rollback, nor return with its rows open: each is an error matching
// [pgtx.ErrInvalidArgument], and nothing is committed.
func Transaction(ctx context.Context, db *sqlx.DB, iso pgtx.Isolation, fn func(ctx context.Context, tx *sqlx.Tx) error) error {
	return TransactionWithOptions(ctx, db, iso, pgtx.Options{}, fn)
}

// TransactionWithOptions is [Transaction] with per-call options, as
// [pgtx.TransactionWithOptions].
func TransactionWithOptions(ctx context.Context, db *sqlx.DB, iso pgtx.Isolation, opts pgtx.Options, fn func(ctx context.Context, tx *sqlx.Tx) error) error {
	switch {
	case db == nil:
		return errNilDB
	case db.DB == nil:
		return errEmptyDB
	case pgtxsql.Pool(db.DB) == nil:
		return errNotPooled
	}
	return pgtxsql.Run(ctx, db.DB, iso, opts, func(ctx context.Context) (*sqlx.Tx, error) { return db.BeginTxx(ctx, nil) }, fn)
}
