// Code in the style sqlc generates; written by hand for this example.
// source: query.sql

package db

import (
	"context"
)

const createAccount = `-- name: CreateAccount :one
insert into accounts (owner, balance) values ($1, $2)
returning id, owner, balance
`

// CreateAccountParams are the parameters of CreateAccount.
type CreateAccountParams struct {
	Owner   string
	Balance int64
}

// CreateAccount inserts an account and returns it.
func (q *Queries) CreateAccount(ctx context.Context, arg CreateAccountParams) (Account, error) {
	row := q.db.QueryRow(ctx, createAccount, arg.Owner, arg.Balance)
	var i Account
	err := row.Scan(&i.ID, &i.Owner, &i.Balance)
	return i, err
}

// CreateAccountsParams are the parameters of one row of CreateAccounts.
type CreateAccountsParams struct {
	Owner   string
	Balance int64
}

const getAccount = `-- name: GetAccount :one
select id, owner, balance from accounts
where id = $1
`

// GetAccount returns the account with the given id, or pgx.ErrNoRows.
func (q *Queries) GetAccount(ctx context.Context, id int64) (Account, error) {
	row := q.db.QueryRow(ctx, getAccount, id)
	var i Account
	err := row.Scan(&i.ID, &i.Owner, &i.Balance)
	return i, err
}

const listAccounts = `-- name: ListAccounts :many
select id, owner, balance from accounts
order by id
`

// ListAccounts returns every account, by id.
func (q *Queries) ListAccounts(ctx context.Context) ([]Account, error) {
	rows, err := q.db.Query(ctx, listAccounts)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var items []Account
	for rows.Next() {
		var i Account
		if err := rows.Scan(&i.ID, &i.Owner, &i.Balance); err != nil {
			return nil, err
		}
		items = append(items, i)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return items, nil
}

const updateBalance = `-- name: UpdateBalance :exec
update accounts set balance = $2
where id = $1
`

// UpdateBalanceParams are the parameters of UpdateBalance.
type UpdateBalanceParams struct {
	ID      int64
	Balance int64
}

// UpdateBalance sets an account's balance.
func (q *Queries) UpdateBalance(ctx context.Context, arg UpdateBalanceParams) error {
	_, err := q.db.Exec(ctx, updateBalance, arg.ID, arg.Balance)
	return err
}

const insertTransfer = `-- name: InsertTransfer :one
insert into transfers (from_account_id, to_account_id, amount) values ($1, $2, $3)
returning id, from_account_id, to_account_id, amount, created_at
`

// InsertTransferParams are the parameters of InsertTransfer.
type InsertTransferParams struct {
	FromAccountID int64
	ToAccountID   int64
	Amount        int64
}

// InsertTransfer records a transfer and returns it.
func (q *Queries) InsertTransfer(ctx context.Context, arg InsertTransferParams) (Transfer, error) {
	row := q.db.QueryRow(ctx, insertTransfer, arg.FromAccountID, arg.ToAccountID, arg.Amount)
	var i Transfer
	err := row.Scan(&i.ID, &i.FromAccountID, &i.ToAccountID, &i.Amount, &i.CreatedAt)
	return i, err
}

const countTransfers = `-- name: CountTransfers :one
select count(*) from transfers
`

// CountTransfers returns the number of recorded transfers.
func (q *Queries) CountTransfers(ctx context.Context) (int64, error) {
	row := q.db.QueryRow(ctx, countTransfers)
	var count int64
	err := row.Scan(&count)
	return count, err
}

const sumBalances = `-- name: SumBalances :one
select coalesce(sum(balance), 0)::bigint from accounts
`

// SumBalances returns the total of all balances.
func (q *Queries) SumBalances(ctx context.Context) (int64, error) {
	row := q.db.QueryRow(ctx, sumBalances)
	var total int64
	err := row.Scan(&total)
	return total, err
}
