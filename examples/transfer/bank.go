package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// initialBalance is every account's balance at the start: enough that no
// transfer of a run is declined for want of funds.
const initialBalance = 100_000

// slowShare is the share of transfers that run the slow check: one in
// slowShare.
const slowShare = 20

// transferReq is one transfer, as a caller asks for it: move amount from
// one account to another, recorded in the ledger under id.
type transferReq struct {
	id       int64
	from, to int
	amount   int
	// check is how long the transfer's check (pg_sleep) runs while it
	// holds its two rows; 0 for most transfers.
	check time.Duration
}

// nextTransfer draws a transfer between two of accounts hot accounts, of 1
// to 10. One in slowShare runs a check of length check, when check > 0.
func nextTransfer(rng *rand.Rand, id int64, accounts int, check time.Duration) transferReq {
	from := 1 + rng.IntN(accounts)
	to := 1 + rng.IntN(accounts-1)
	if to >= from {
		to++
	}
	t := transferReq{id: id, from: from, to: to, amount: 1 + rng.IntN(10)}
	if rng.IntN(slowShare) == 0 {
		t.check = check
	}
	return t
}

// insufficientFunds is a transfer's own error: the source account cannot
// pay.
type insufficientFunds struct{ account int }

func (e insufficientFunds) Error() string {
	return fmt.Sprintf("insufficient funds on account %d", e.account)
}

// apply is the transfer's transaction, the same for every loop: read the
// source balance, update both rows (lower id first, so that two transfers
// never wait for each other in a cycle), record the transfer in the ledger,
// and run the check, if any, while the rows are held. Two transfers that
// touch the same account conflict under SERIALIZABLE (40001).
func (t transferReq) apply(ctx context.Context, tx pgx.Tx) error {
	if t.check > 0 {
		if _, err := tx.Exec(ctx, "select pg_sleep($1)", t.check.Seconds()); err != nil {
			return err
		}
	}
	var balance int64
	if err := tx.QueryRow(ctx, "select balance from accounts where id = $1", t.from).Scan(&balance); err != nil {
		return err
	}
	if balance < int64(t.amount) {
		return insufficientFunds{account: t.from}
	}
	first, second := min(t.from, t.to), max(t.from, t.to)
	for _, id := range [2]int{first, second} {
		delta := t.amount
		if id == t.from {
			delta = -t.amount
		}
		if _, err := tx.Exec(ctx, "update accounts set balance = balance + $1 where id = $2", delta, id); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, "insert into ledger (transfer_id, from_id, to_id, amount) values ($1, $2, $3, $4)",
		t.id, t.from, t.to, t.amount); err != nil {
		return err
	}
	return nil
}

// createBank makes a fresh schema of accounts and an empty ledger. The
// ledger has no key on transfer_id: it records every time a transfer was
// applied, so that the audit sees one applied twice.
func createBank(ctx context.Context, conn *pgx.Conn, schema string, accounts int) error {
	s := pgx.Identifier{schema}.Sanitize()
	sql := fmt.Sprintf(`drop schema if exists %[1]s cascade;
		create schema %[1]s;
		create table %[1]s.accounts (id int primary key, balance bigint not null check (balance >= 0));
		insert into %[1]s.accounts select g, %[2]d from generate_series(1, %[3]d) g;
		create table %[1]s.ledger (transfer_id bigint not null, from_id int not null, to_id int not null, amount int not null)`,
		s, initialBalance, accounts)
	_, err := conn.Exec(ctx, sql)
	return err
}

// dropBank removes what createBank made.
func dropBank(ctx context.Context, conn *pgx.Conn, schema string) error {
	_, err := conn.Exec(ctx, "drop schema if exists "+pgx.Identifier{schema}.Sanitize()+" cascade")
	return err
}

// books is what a bank's tables say once its run is over.
type books struct {
	// applied counts the ledger's rows of each transfer: how many times it
	// was applied.
	applied map[int64]int
	// total is the sum of the balances, and want what it must be.
	total, want int64
	// drift counts the accounts whose balance is not the initial balance
	// plus what the ledger says came in, minus what went out.
	drift int
}

// readBooks reads a bank's ledger and balances.
func readBooks(ctx context.Context, conn *pgx.Conn, schema string, accounts int) (books, error) {
	s := pgx.Identifier{schema}.Sanitize()
	b := books{applied: make(map[int64]int), want: int64(accounts) * initialBalance}
	rows, err := conn.Query(ctx, "select transfer_id, count(*) from "+s+".ledger group by transfer_id")
	if err != nil {
		return b, err
	}
	var id, n int64
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		b.applied[id] = int(n)
		return nil
	})
	if err != nil {
		return b, err
	}
	err = conn.QueryRow(ctx, fmt.Sprintf(`select coalesce(sum(balance), 0),
			count(*) filter (where balance <> %[2]d
				+ coalesce((select sum(amount) from %[1]s.ledger where to_id = a.id), 0)
				- coalesce((select sum(amount) from %[1]s.ledger where from_id = a.id), 0))
		from %[1]s.accounts a`, s, initialBalance)).Scan(&b.total, &b.drift)
	return b, err
}
