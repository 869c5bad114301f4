package pgtxgorm

import (
	"context"
	"database/sql"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// Dialector is GORM's PostgreSQL dialector over [pgtxsql.OpenDB] of pool:
// gorm.Open(pgtxgorm.Dialector(pool), &gorm.Config{...}). Closing the
// *gorm.DB's *sql.DB does not close pool.
func Dialector(pool *pgtx.Pool) gorm.Dialector {
	return postgres.New(postgres.Config{Conn: pgtxsql.OpenDB(pool)})
}

// Open opens a [pgtx.Pool] for connString and a *gorm.DB over it with
// GORM's options opts; closing the *gorm.DB's *sql.DB closes the pool.
func Open(ctx context.Context, connString string, opts ...gorm.Option) (*gorm.DB, error) {
	sqlDB, err := pgtxsql.Open(ctx, connString)
	if err != nil {
		return nil, err
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), opts...)
	if err != nil {
		_ = sqlDB.Close()
		return nil, err
	}
	return db, nil
}

// Transaction runs fn in a transaction of db and commits it when fn
// returns nil, with the contract of [pgtx.Transaction] and
// [pgtxsql.Transaction]. fn's tx is a session of db on the attempt's
// transaction, with the attempt's context ([pgtx.Attempt] and
// [pgtx.AfterCommit] take tx.Statement.Context). db is a *gorm.DB of
// [Open] or of gorm.Open over [Dialector], or a session of one: any other,
// a transaction's included, is an error matching [pgtx.ErrInvalidArgument]
// (a transaction's also matches [gorm.ErrInvalidTransaction]). It is
// [TransactionWithOptions] with the zero [pgtx.Options].
//
// A statement's conflict (40001, 40P01), which pgtx reruns the transaction
// for, goes to db's logger as an Info note, not as an error (unless
// [pgtx.Options].MaxRetries is negative).
//
// fn must not call tx.Commit or tx.Rollback, nor return with rows open:
// each is an error matching [pgtx.ErrInvalidArgument], and nothing is
// committed.
func Transaction(ctx context.Context, db *gorm.DB, iso pgtx.Isolation, fn func(tx *gorm.DB) error) error {
	return TransactionWithOptions(ctx, db, iso, pgtx.Options{}, fn)
}

// TransactionWithOptions is [Transaction] with per-call options, as
// [pgtx.TransactionWithOptions].
func TransactionWithOptions(ctx context.Context, db *gorm.DB, iso pgtx.Isolation, opts pgtx.Options, fn func(tx *gorm.DB) error) error {
	sqlDB, err := pooled(db)
	if err != nil {
		return err
	}
	if fn == nil {
		return errNilFn
	}
	log := db.Logger
	if _, ok := log.(rerunLogger); !ok && log != nil && opts.MaxRetries >= 0 {
		log = rerunLogger{log}
	}
	return pgtxsql.Run(ctx, sqlDB, iso, opts,
		func(ctx context.Context) (session, error) {
			tx := db.Session(&gorm.Session{Context: ctx, Logger: log}).Begin()
			return session{tx}, tx.Error
		},
		func(_ context.Context, s session) error { return fn(s.DB) })
}

// pooled returns the *sql.DB under db, or an error matching
// [pgtx.ErrInvalidArgument] unless db is a *gorm.DB of [Open] or
// [Dialector], or a session of one, and not a transaction's.
func pooled(db *gorm.DB) (*sql.DB, error) {
	switch {
	case db == nil:
		return nil, errNilDB
	case db.Config == nil || db.Statement == nil || db.Callback() == nil || db.Dialector == nil || db.Statement.ConnPool == nil:
		return nil, errNotGORM
	}
	if _, ok := db.Statement.ConnPool.(gorm.TxCommitter); ok {
		return nil, errTxDB{}
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, errNotGORM
	}
	if pgtxsql.Pool(sqlDB) == nil {
		return nil, errNotPooled
	}
	return sqlDB, nil
}

// session is GORM's transaction as pgtxsql.Run ends it.
type session struct{ *gorm.DB }

// Rollback ends the session's transaction for GORM.
func (s session) Rollback() error { return s.DB.Rollback().Error }
