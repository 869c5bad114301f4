-- The schema of the repository example; main.go embeds and runs it. The
-- tables live in their own schema, which the example's pool puts first on
-- its search_path, so a DATABASE_URL's own "accounts" table is never touched.
drop schema if exists pgtx_repository_example cascade;
create schema pgtx_repository_example;

create table pgtx_repository_example.accounts (
    id      bigserial primary key,
    owner   text   not null,
    balance bigint not null check (balance >= 0)
);

create table pgtx_repository_example.transfers (
    id              bigserial primary key,
    from_account_id bigint      not null references pgtx_repository_example.accounts (id),
    to_account_id   bigint      not null references pgtx_repository_example.accounts (id),
    amount          bigint      not null check (amount > 0),
    created_at      timestamptz not null default now()
);
