package deferred_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/deferred"
)

var errInsufficientFunds = errors.New("insufficient funds")

// transfer reads the payer's balance, which steers it, and defers the
// writes, whose results it does not read: two round trips in all.
func transfer(ctx context.Context, pool *pgtx.Pool, from, to, amount int64) error {
	return pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		var balance int64
		if err := tx.QueryRow(ctx, "select balance from accounts where id = $1 for update", from).Scan(&balance); err != nil {
			return err
		}
		if balance < amount {
			return errInsufficientFunds
		}
		if err := deferred.Exec(ctx, "update accounts set balance = balance - $2 where id = $1", from, amount); err != nil {
			return err
		}
		if err := deferred.Exec(ctx, "update accounts set balance = balance + $2 where id = $1", to, amount); err != nil {
			return err
		}
		return deferred.Exec(ctx, "insert into ledger (payer, payee, amount) values ($1, $2, $3)", from, to, amount)
	})
}

func ExampleExec() {
	ctx := context.Background()
	pool, err := pgtx.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	if err := transfer(ctx, pool, 1, 2, 10); err != nil {
		fmt.Println(err)
	}
}

// The statements are known in advance: one write carries BEGIN, them and
// COMMIT. A condition belongs in the SQL: the payer's update changes no
// row when the balance is short, and the check constraint refuses an
// overdraft.
func ExampleTransaction() {
	ctx := context.Background()
	pool, err := pgtx.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	b := &pgx.Batch{}
	b.Queue("update accounts set balance = balance - $2 where id = $1", 1, 10)
	b.Queue("update accounts set balance = balance + $2 where id = $1", 2, 10)
	var id int64
	b.Queue("insert into ledger (payer, payee, amount) values ($1, $2, $3) returning id", 1, 2, 10).
		QueryRow(func(row pgx.Row) error { return row.Scan(&id) })
	if err := deferred.Transaction(ctx, pool, pgtx.ReadCommitted, pgtx.Options{}, b); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("ledger row", id)
}
