-- Messages to send once their transaction has committed.
CREATE TABLE outbox (
	id      bigserial PRIMARY KEY,
	account bigint NOT NULL REFERENCES accounts,
	body    text NOT NULL
);
CREATE INDEX outbox_account ON outbox (account);
