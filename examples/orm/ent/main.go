// Command ent moves 30 between two accounts with an ent client over pgtx:
// the client's driver is opened on pgtxsql.OpenDB's *sql.DB, and withTx,
// in the shape of the WithTx helper of ent's documentation, runs the
// generated client's transaction (Client.Tx) through pgtxsql.Run, with
// pgtx.Transaction's contract (reruns on 40001 and 40P01, cancel on the
// server when ctx ends, COMMIT resolved when its answer is lost).
//
// The client, in ./ent, is generated from ./ent/schema (go generate ./ent).
// The program uses DATABASE_URL when set, otherwise it starts a throwaway
// PostgreSQL from the locally installed binaries (or Docker) and removes it
// at the end:
//
//	go run ./ent
package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/examples/orm/ent/ent"
	"github.com/pgtx-go/pgtx/examples/orm/ent/ent/account"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// withTx runs fn in a transaction of client's, begun by client.Tx, with
// pgtx.Transaction's contract: fn may run more than once, and a nil error
// means committed once. db is the *sql.DB, opened by pgtxsql, that
// client's driver is on.
func withTx(ctx context.Context, db *sql.DB, client *ent.Client, iso pgtx.Isolation, fn func(ctx context.Context, tx *ent.Tx) error) error {
	return pgtxsql.Run(ctx, db, iso, pgtx.Options{}, client.Tx, fn)
}

// openClient returns an ent client on pool and the *sql.DB its driver is
// on. Closing the client closes the *sql.DB, not pool.
func openClient(pool *pgtx.Pool) (*ent.Client, *sql.DB) {
	db := pgtxsql.OpenDB(pool)
	return ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db))), db
}

// createAccounts creates an account for each balance and returns their ids.
func createAccounts(ctx context.Context, client *ent.Client, balances ...int64) ([]int, error) {
	accounts, err := client.Account.MapCreateBulk(balances, func(c *ent.AccountCreate, i int) {
		c.SetBalance(balances[i])
	}).Save(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]int, len(accounts))
	for i, a := range accounts {
		ids[i] = a.ID
	}
	return ids, nil
}

// transfer moves amount from account from to account to in tx.
func transfer(ctx context.Context, tx *ent.Tx, from, to int, amount int64) error {
	if err := tx.Account.UpdateOneID(from).AddBalance(-amount).Exec(ctx); err != nil {
		return err
	}
	return tx.Account.UpdateOneID(to).AddBalance(amount).Exec(ctx)
}

// balances returns the balances of the accounts ids.
func balances(ctx context.Context, client *ent.Client, ids ...int) ([]int64, error) {
	accounts, err := client.Account.Query().Where(account.IDIn(ids...)).Order(account.ByID()).All(ctx)
	if err != nil {
		return nil, err
	}
	bs := make([]int64, len(accounts))
	for i, a := range accounts {
		bs[i] = a.Balance
	}
	return bs, nil
}

// run opens a pool on dsn, creates the schema and two accounts, and moves
// 30 from the first to the second.
func run(ctx context.Context, dsn string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgtx.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, db := openClient(pool)
	defer client.Close()

	if err := client.Schema.Create(ctx); err != nil {
		return err
	}
	ids, err := createAccounts(ctx, client, 100, 0)
	if err != nil {
		return err
	}
	err = withTx(ctx, db, client, pgtx.Serializable, func(ctx context.Context, tx *ent.Tx) error {
		return transfer(ctx, tx, ids[0], ids[1], 30)
	})
	if err != nil {
		return err
	}
	bs, err := balances(ctx, client, ids...)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "moved 30 from account %d to account %d: balances %v\n", ids[0], ids[1], bs)
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
