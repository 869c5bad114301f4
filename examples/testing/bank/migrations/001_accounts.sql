-- Accounts and their balances, in cents.
create table accounts (
	id      bigint primary key,
	balance bigint not null check (balance >= 0)
);
