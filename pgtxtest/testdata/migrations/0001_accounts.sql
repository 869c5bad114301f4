-- The accounts of the examples.
CREATE TABLE accounts (
	id      bigint PRIMARY KEY,
	balance bigint NOT NULL CHECK (balance >= 0)
);
