-- The queries of the repository example, as sqlc would read them.
-- db/query.sql.go holds the Go code for them (written by hand, in sqlc's style).

-- name: CreateAccount :one
insert into accounts (owner, balance) values ($1, $2)
returning id, owner, balance;

-- name: CreateAccounts :copyfrom
insert into accounts (owner, balance) values ($1, $2);

-- name: GetAccount :one
select id, owner, balance from accounts
where id = $1;

-- name: ListAccounts :many
select id, owner, balance from accounts
order by id;

-- name: UpdateBalance :exec
update accounts set balance = $2
where id = $1;

-- name: InsertTransfer :one
insert into transfers (from_account_id, to_account_id, amount) values ($1, $2, $3)
returning id, from_account_id, to_account_id, amount, created_at;

-- name: CountTransfers :one
select count(*) from transfers;

-- name: SumBalances :one
select coalesce(sum(balance), 0)::bigint from accounts;
