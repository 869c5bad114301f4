// Command quickstart is the README's quick start: it opens a pool on
// DATABASE_URL (or on a throwaway server when it is not set), moves 30
// between two accounts in one transaction, and handles what can come back.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

func main() {
	// DATABASE_URL when it is set; else a throwaway PostgreSQL (Docker, or
	// the local server binaries) that stop removes. Your program would
	// read its own setting here.
	dsn, stop, err := server.DatabaseURL(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	err = transfer(dsn)
	stop()
	switch {
	case err == nil:
		fmt.Println("moved 30 from account 1 to account 2")
	case errors.Is(err, pgtx.ErrCommitUnknown):
		// COMMIT was sent, its answer was lost, and the server could not
		// tell: it may have committed. Look before running it again.
		log.Fatalf("outcome unknown: %v", err)
	default:
		// Not committed: a constraint, a timeout, or retries used up.
		log.Fatalf("not moved: %v", err)
	}
}

func transfer(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	pool, err := pgtx.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `create table if not exists accounts (id int primary key, balance bigint not null check (balance >= 0));
		insert into accounts values (1, 100), (2, 0) on conflict do nothing`); err != nil {
		return err
	}

	// fn may run more than once: on a serialization failure or a deadlock
	// the whole transaction runs again.
	return pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "update accounts set balance = balance - 30 where id = 1"); err != nil {
			return err // 23514 when the balance would go below 0: not retried
		}
		_, err := tx.Exec(ctx, "update accounts set balance = balance + 30 where id = 2")
		return err
	})
}
