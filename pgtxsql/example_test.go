package pgtxsql_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"os"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxsql"
)

// Transaction with a *sql.Tx: fn may run more than once, and must not
// call Commit or Rollback.
func ExampleTransaction() {
	ctx := context.Background()
	db, err := pgtxsql.Open(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	err = pgtxsql.Transaction(ctx, db, pgtx.Serializable, func(ctx context.Context, tx *sql.Tx) error {
		var balance int64
		if err := tx.QueryRowContext(ctx, "select balance from accounts where id = $1", 1).Scan(&balance); err != nil {
			return err
		}
		if balance < 30 {
			return errors.New("insufficient funds") // not retried
		}
		_, err := tx.ExecContext(ctx, "update accounts set balance = balance - 30 where id = $1", 1)
		return err
	})
	if errors.Is(err, pgtx.ErrCommitUnknown) {
		log.Fatalf("COMMIT's answer was lost and nothing could tell: %v", err)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// OpenDB over a pool the program already has: the *sql.DB and the pool
// share the pool's connections and limits.
func ExampleOpenDB() {
	ctx := context.Background()
	pool, err := pgtx.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	db := pgtxsql.OpenDB(pool)
	defer db.Close()

	err = pgtxsql.TransactionWithOptions(ctx, db, pgtx.RepeatableRead, pgtx.Options{ReadOnly: true, Label: "report"},
		func(ctx context.Context, tx *sql.Tx) error {
			var n int64
			return tx.QueryRowContext(ctx, "select count(*) from accounts").Scan(&n)
		})
	if err != nil {
		log.Fatal(err)
	}
	// The pool's Stats count the *sql.DB's transactions.
	log.Printf("transactions: %d, cancels sent: %d", pool.Stats().TransactionCount, pool.Stats().Cancels.SentCount)
}

// Run for code that begins its transactions itself, as a library does
// (sqlx's BeginTxx, Bun's BeginTx, ent's Client.Tx): the BeginTx on db,
// with the ctx Run gives, returns the attempt's transaction.
func ExampleRun() {
	ctx := context.Background()
	db, err := pgtxsql.Open(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	begin := func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) }
	err = pgtxsql.Run(ctx, db, pgtx.Serializable, pgtx.Options{}, begin, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "insert into audit (what) values ($1)", "login")
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}
