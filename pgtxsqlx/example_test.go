package pgtxsqlx_test

import (
	"context"
	"errors"
	"log"
	"os"

	"github.com/jmoiron/sqlx"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxsqlx"
)

type account struct {
	ID      int64 `db:"id"`
	Balance int64 `db:"balance"`
}

// Transaction with a *sqlx.Tx: fn may run more than once, and must not
// call Commit or Rollback.
func ExampleTransaction() {
	ctx := context.Background()
	db, err := pgtxsqlx.Open(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	err = pgtxsqlx.Transaction(ctx, db, pgtx.Serializable, func(ctx context.Context, tx *sqlx.Tx) error {
		var from account
		if err := tx.GetContext(ctx, &from, "select id, balance from accounts where id = $1", 1); err != nil {
			return err
		}
		if from.Balance < 30 {
			return errors.New("insufficient funds") // not retried
		}
		if _, err := tx.ExecContext(ctx, "update accounts set balance = balance - 30 where id = $1", from.ID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "update accounts set balance = balance + 30 where id = $1", 2)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}

// OpenDB over a pool the program already has, and per-call options.
func ExampleTransactionWithOptions() {
	ctx := context.Background()
	pool, err := pgtx.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	db := pgtxsqlx.OpenDB(pool)
	defer db.Close()

	var accounts []account
	err = pgtxsqlx.TransactionWithOptions(ctx, db, pgtx.RepeatableRead, pgtx.Options{ReadOnly: true},
		func(ctx context.Context, tx *sqlx.Tx) error {
			accounts = accounts[:0] // fn may run again: start afresh
			return tx.SelectContext(ctx, &accounts, "select id, balance from accounts order by id")
		})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%d accounts", len(accounts))
}
