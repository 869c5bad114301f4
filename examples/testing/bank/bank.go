// Package bank is a small repository on pgtx, written as an application
// would write it, and its tests (bank_test.go) show how such code is tested
// with pgtxtest: every test on a database of its own made from the
// migrations in the migrations directory, and fault tests that prove the
// transaction callback is safe to run again.
package bank

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// The domain errors. They are returned from inside the transaction callback:
// pgtx does not retry them and returns them as they are, so errors.Is works.
var (
	ErrInsufficientFunds = errors.New("bank: insufficient funds")
	ErrNoAccount         = errors.New("bank: no such account")
	ErrInvalidAmount     = errors.New("bank: amount must be positive")
)

// Repo is the bank's repository. Its methods are safe for concurrent use.
type Repo struct {
	pool *pgtx.Pool

	// OnTransfer, when set, is called once for each transfer that committed,
	// after the commit: the place for work outside the database, such as a
	// notification or an event. It is not called for a transfer that failed,
	// nor when the outcome of the commit is unknown (pgtx.ErrCommitUnknown).
	OnTransfer func(from, to, amount int64)
}

// New returns a repository on pool.
func New(pool *pgtx.Pool) *Repo { return &Repo{pool: pool} }

// Open creates the account id with the given balance.
func (r *Repo) Open(ctx context.Context, id, balance int64) error {
	_, err := r.pool.Exec(ctx, "insert into accounts (id, balance) values ($1, $2)", id, balance)
	return err
}

// Balance returns the balance of the account id.
func (r *Repo) Balance(ctx context.Context, id int64) (int64, error) {
	var balance int64
	err := r.pool.QueryRow(ctx, "select balance from accounts where id = $1", id).Scan(&balance)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("account %d: %w", id, ErrNoAccount)
	}
	return balance, err
}

// Transfers returns the number of transfers applied.
func (r *Repo) Transfers(ctx context.Context) (int64, error) {
	var n int64
	err := r.pool.QueryRow(ctx, "select count(*) from transfers").Scan(&n)
	return n, err
}

// Transfer moves amount from one account to another, in a SERIALIZABLE
// transaction that pgtx runs again on a serialization failure or deadlock.
// It returns an error matching ErrInsufficientFunds, without retrying, when
// the balance of from is less than amount.
func (r *Repo) Transfer(ctx context.Context, from, to, amount int64) error {
	return r.TransferOnce(ctx, "", from, to, amount)
}

// TransferOnce is Transfer under an idempotency key (none when key is
// empty): a transfer whose key has been recorded is not applied again, and
// TransferOnce returns nil for it. After an error matching
// pgtx.ErrCommitUnknown, where the transfer may or may not have committed,
// calling TransferOnce again with the same key is safe, and Applied tells
// which it was.
func (r *Repo) TransferOnce(ctx context.Context, key string, from, to, amount int64) error {
	if amount <= 0 {
		return fmt.Errorf("transfer of %d: %w", amount, ErrInvalidAmount)
	}
	return pgtx.Transaction(ctx, r.pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		return r.transfer(ctx, tx, key, from, to, amount)
	})
}

// Applied reports whether the transfer with the idempotency key key has
// been applied.
func (r *Repo) Applied(ctx context.Context, key string) (bool, error) {
	var applied bool
	err := r.pool.QueryRow(ctx, "select exists (select from transfers where key = $1)", key).Scan(&applied)
	return applied, err
}

// transfer is the body of the transaction: pgtx may run it more than once,
// each time in a new transaction, so it does nothing but database work and
// leaves everything else to pgtx.AfterCommit.
func (r *Repo) transfer(ctx context.Context, tx pgx.Tx, key string, from, to, amount int64) error {
	if key != "" {
		var applied bool
		err := tx.QueryRow(ctx, "select exists (select from transfers where key = $1)", key).Scan(&applied)
		if err != nil || applied {
			return err // applied before under this key: nothing to do
		}
	}
	var balance int64
	err := tx.QueryRow(ctx, "select balance from accounts where id = $1", from).Scan(&balance)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("account %d: %w", from, ErrNoAccount)
	}
	if err != nil {
		return err
	}
	if balance < amount {
		return ErrInsufficientFunds
	}
	if _, err := tx.Exec(ctx, "update accounts set balance = balance - $1 where id = $2", amount, from); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, "update accounts set balance = balance + $1 where id = $2", amount, to)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("account %d: %w", to, ErrNoAccount)
	}
	// Two transactions recording the same key: the second fails with a
	// serialization failure (it read the key's absence), runs again and
	// finds the key.
	_, err = tx.Exec(ctx, "insert into transfers (key, from_id, to_id, amount) values (nullif($1, ''), $2, $3, $4)",
		key, from, to, amount)
	if err != nil {
		return err
	}
	// Calling r.OnTransfer here would be the mistake: this function runs once
	// per attempt, and an attempt whose COMMIT fails with a serialization
	// failure is followed by another, so the hook would run twice for one
	// transfer (bank_test.go shows it). AfterCommit runs it once, after the
	// commit.
	if r.OnTransfer != nil {
		return pgtx.AfterCommit(ctx, func(context.Context) { r.OnTransfer(from, to, amount) })
	}
	return nil
}
