// Command bun moves 30 between two accounts with Bun over pgtx: the
// *bun.DB is opened on pgtxsql.OpenDB's *sql.DB, and runInTx, in the shape
// of Bun's DB.RunInTx, runs the transfer with pgtx.Transaction's contract
// (reruns on 40001 and 40P01, cancel on the server when ctx ends, COMMIT
// resolved when its answer is lost).
//
// It uses DATABASE_URL when set, otherwise it starts a throwaway PostgreSQL
// from the locally installed binaries (or Docker) and removes it at the end:
//
//	go run ./bun
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// Account is a row of accounts.
type Account struct {
	bun.BaseModel `bun:"table:accounts"`

	ID      int64 `bun:",pk"`
	Balance int64 `bun:",notnull"`
}

// runInTx runs fn in a transaction of db, as db.RunInTx does, with
// pgtx.Transaction's contract: fn may run more than once, and a nil error
// means committed once. db must be opened on pgtxsql's *sql.DB.
func runInTx(ctx context.Context, db *bun.DB, iso pgtx.Isolation, fn func(ctx context.Context, tx bun.Tx) error) error {
	return pgtxsql.Run(ctx, db.DB, iso, pgtx.Options{}, func(ctx context.Context) (bun.Tx, error) {
		return db.BeginTx(ctx, nil)
	}, fn)
}

// openDB returns a *bun.DB on pool. Closing it does not close pool.
func openDB(pool *pgtx.Pool) *bun.DB {
	return bun.NewDB(pgtxsql.OpenDB(pool), pgdialect.New())
}

// createAccounts creates the accounts table, if it is not there, with an
// account for each balance: ids 1, 2, ...
func createAccounts(ctx context.Context, db *bun.DB, balances ...int64) error {
	if _, err := db.ExecContext(ctx, `create table if not exists accounts (
		id bigint primary key, balance bigint not null check (balance >= 0))`); err != nil {
		return err
	}
	accounts := make([]Account, len(balances))
	for i, b := range balances {
		accounts[i] = Account{ID: int64(i + 1), Balance: b}
	}
	_, err := db.NewInsert().Model(&accounts).On("CONFLICT DO NOTHING").Exec(ctx)
	return err
}

// transfer moves amount from account from to account to in tx.
func transfer(ctx context.Context, tx bun.Tx, from, to, amount int64) error {
	if _, err := tx.NewUpdate().Model((*Account)(nil)).
		Set("balance = balance - ?", amount).Where("id = ?", from).Exec(ctx); err != nil {
		return err // 23514 when the balance would go below 0: not rerun
	}
	_, err := tx.NewUpdate().Model((*Account)(nil)).
		Set("balance = balance + ?", amount).Where("id = ?", to).Exec(ctx)
	return err
}

// balances returns the balances of accounts by id.
func balances(ctx context.Context, db bun.IDB) ([]int64, error) {
	var bs []int64
	err := db.NewSelect().Model((*Account)(nil)).Column("balance").Order("id").Scan(ctx, &bs)
	return bs, err
}

// run opens a pool on dsn, creates two accounts and moves 30 from the first
// to the second.
func run(ctx context.Context, dsn string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgtx.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	db := openDB(pool)
	defer db.Close()

	if err := createAccounts(ctx, db, 100, 0); err != nil {
		return err
	}
	err = runInTx(ctx, db, pgtx.Serializable, func(ctx context.Context, tx bun.Tx) error {
		return transfer(ctx, tx, 1, 2, 30)
	})
	if err != nil {
		return err
	}
	bs, err := balances(ctx, db)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "moved 30 from account 1 to account 2: balances %v\n", bs)
	return err
}

func main() {
	dsn, stop, err := server.DatabaseURL(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	err = run(context.Background(), dsn, os.Stdout)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}
