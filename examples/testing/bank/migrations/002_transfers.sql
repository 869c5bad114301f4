-- One row per transfer applied. key is the caller's idempotency key (null when
-- the caller gave none): a transfer whose key is here has been applied.
create table transfers (
	id      bigserial primary key,
	key     text unique,
	from_id bigint not null references accounts,
	to_id   bigint not null references accounts,
	amount  bigint not null check (amount > 0)
);
