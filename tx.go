package pgtx

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Isolation is a transaction isolation level. The zero value is not one:
// Transaction refuses it.
type Isolation int

// The isolation levels of PostgreSQL. READ UNCOMMITTED is absent: PostgreSQL
// runs it as READ COMMITTED.
const (
	ReadCommitted Isolation = iota + 1
	RepeatableRead
	Serializable
)

// String returns the SQL name of the level.
func (i Isolation) String() string {
	switch i {
	case ReadCommitted:
		return "READ COMMITTED"
	case RepeatableRead:
		return "REPEATABLE READ"
	case Serializable:
		return "SERIALIZABLE"
	}
	return "Isolation(" + strconv.Itoa(int(i)) + ")"
}

func (i Isolation) valid() bool { return i >= ReadCommitted && i <= Serializable }

// Options are the per-call settings of [TransactionWithOptions] and
// [TransactionValue]. The zero value keeps the [Pool]'s.
type Options struct {
	// Label names the call in traces and metrics (e.g. "transfer").
	Label string

	// ReadOnly begins the transaction READ ONLY.
	ReadOnly bool

	// Deferrable begins the transaction DEFERRABLE, which only SERIALIZABLE
	// READ ONLY transactions heed.
	Deferrable bool

	// StatementTimeout, when positive, limits every statement of this
	// transaction. 0 keeps the session's ([Config].StatementTimeout);
	// negative: none but what the context's deadline carries.
	StatementTimeout time.Duration

	// MaxRetries overrides [RetryConfig].MaxRetries for this call: 0 keeps
	// the pool's, negative means no conflict or lost-connection retries.
	MaxRetries int

	// MaxAdaptiveRetries overrides [RetryConfig].MaxAdaptiveRetries for
	// this call: 0 keeps the pool's, negative means no overload retries.
	MaxAdaptiveRetries int

	// UnavailableTimeout overrides [RetryConfig].UnavailableTimeout for
	// this call: 0 keeps the pool's, negative means no wait.
	UnavailableTimeout time.Duration

	// RetryUniqueViolations, under [Serializable], retries a unique
	// violation (23505) or an exclusion violation (23P01) as a conflict: set
	// it only for transactions that check before they insert, since a true
	// duplicate then costs MaxRetries retries. At the other levels it has
	// no effect: only SERIALIZABLE makes a violation after a check a
	// conflict in disguise, so one Options may serve calls of any level.
	// See docs/retries.md.
	RetryUniqueViolations bool
}

// Transaction runs fn in a transaction on a connection from pool and
// commits it when fn returns nil. It is [TransactionWithOptions] with the
// zero [Options].
//
// A conflict, a lost connection, an overload or a failover runs the whole
// transaction again within ctx's deadline and the pool's [RetryConfig], so
// fn must be safe to run more than once ([AfterCommit], [Attempt]). A
// COMMIT whose answer was lost and cannot be resolved gives an error
// matching [ErrCommitUnknown]. When ctx ends, the running statement is
// cancelled on the server and errors.Is(err, ctx.Err()) holds.
//
// fn's [pgx.Tx] is of this attempt only. fn must not end the transaction
// itself, keep rows open, or call Transaction on the same pool with its
// ctx: each is an error matching [ErrInvalidArgument]. See [retries].
//
// [retries]: https://github.com/pgtx-go/pgtx/blob/main/docs/retries.md
func Transaction(ctx context.Context, pool *Pool, iso Isolation, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return TransactionWithOptions(ctx, pool, iso, Options{}, fn)
}

// TransactionWithOptions is [Transaction] with per-call [Options]. Bad
// input is an error matching [ErrInvalidArgument] and sends nothing.
func TransactionWithOptions(ctx context.Context, pool *Pool, iso Isolation, opts Options, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if err := validateCall(ctx, pool, iso, fn); err != nil {
		return err
	}
	c := pool.newCall(ctx, iso, &opts, fn)
	var err error
	if pool.breaker == nil {
		err = c.run(ctx)
	} else {
		err = pool.breaker.do(ctx, c.run)
	}
	if err == nil {
		c.cur.afterCommit(ctx)
	}
	return err
}

// TransactionValue is [TransactionWithOptions] for a fn that returns a
// value: that of the attempt that committed.
func TransactionValue[T any](ctx context.Context, pool *Pool, iso Isolation, opts Options, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var v, zero T
	var inner func(context.Context, pgx.Tx) error
	if fn != nil {
		inner = func(ctx context.Context, tx pgx.Tx) error {
			r, err := fn(ctx, tx)
			v = r
			return err
		}
	}
	if err := TransactionWithOptions(ctx, pool, iso, opts, inner); err != nil {
		return zero, err
	}
	return v, nil
}

func validateCall(ctx context.Context, pool *Pool, iso Isolation, fn func(context.Context, pgx.Tx) error) error {
	switch {
	case ctx == nil:
		return invalidArg("nil context")
	case pool == nil:
		return invalidArg("nil pool")
	case pool.pool == nil || pool.queue == nil:
		return errPoolNotOpened
	case fn == nil:
		return invalidArg("nil fn")
	case !iso.valid():
		return invalidArg(fmt.Sprintf("unknown isolation level %d: use ReadCommitted, RepeatableRead or Serializable", int(iso)))
	}
	if attemptOf(ctx).inside(pool) {
		return errNested
	}
	return nil
}
