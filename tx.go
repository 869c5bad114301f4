package pgtx

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Isolation is a transaction isolation level. It is a closed set: the SQL it
// stands for is chosen by pgtx, never taken from the caller. The zero value
// is not a level: Transaction refuses it, so a forgotten field never silently
// means something else.
type Isolation int

// The isolation levels of PostgreSQL. READ UNCOMMITTED is absent: PostgreSQL
// runs it as READ COMMITTED.
const (
	ReadCommitted Isolation = iota + 1
	RepeatableRead
	Serializable
)

// String returns the SQL name of the level, or "Isolation(n)" for a value
// that is not one.
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
// [TransactionValue]. The zero value is valid: every field as configured on
// the [Pool].
type Options struct {
	// Label names the call in traces and metrics (e.g. "transfer").
	Label string

	// ReadOnly begins the transaction READ ONLY.
	ReadOnly bool

	// Deferrable begins the transaction DEFERRABLE. PostgreSQL gives it
	// effect only for SERIALIZABLE READ ONLY transactions, which then wait
	// for a safe snapshot and can never fail with 40001.
	Deferrable bool

	// StatementTimeout, when positive, limits every statement of this
	// transaction: it is set for the transaction only, in the write that
	// carries BEGIN. 0 keeps the session's ([Config].StatementTimeout);
	// negative: no statement timeout for this transaction
	// (statement_timeout 0), except what the context's deadline carries.
	StatementTimeout time.Duration

	// MaxRetries overrides [RetryConfig].MaxRetries for this call: 0 keeps
	// the pool's, negative means no conflict or lost-connection retries.
	MaxRetries int

	// MaxAdaptiveRetries overrides [RetryConfig].MaxAdaptiveRetries for
	// this call: 0 keeps the pool's, negative means no overload retries.
	MaxAdaptiveRetries int

	// UnavailableTimeout overrides [RetryConfig].UnavailableTimeout for
	// this call: 0 keeps the pool's, negative means an unavailable server
	// is not retried.
	UnavailableTimeout time.Duration

	// RetryUniqueViolations, under [Serializable], retries a unique
	// violation (23505) or an exclusion violation (23P01) as a conflict.
	// The PostgreSQL documentation (§13.5, "Serialization Failure
	// Handling") notes that such an error can be a serialization failure
	// in disguise: two transactions that each checked a key was free and
	// then both inserted it. Retried, the loser sees the winner's row and
	// takes its other path. It is off by default because a true duplicate
	// then costs MaxRetries retries before it is returned: switch it on
	// only for transactions that check before they insert. Ignored at
	// other isolation levels.
	RetryUniqueViolations bool
}

// Transaction runs fn in a transaction on a connection from pool and commits
// it. It is [TransactionWithOptions] with the zero [Options].
//
// On a serialization failure (40001) or deadlock (40P01) the whole
// transaction runs again — a new BEGIN, fn again, a new COMMIT — after a
// short jittered pause. On an overload error it backs off exponentially with
// full jitter; a server it cannot connect to (refused while it restarts, no
// read-write host while a standby is promoted) is retried the same way until
// ctx's deadline or [RetryConfig].UnavailableTimeout, whichever comes
// first. If the connection is lost before COMMIT it runs again on a fresh
// connection. If the connection is lost while COMMIT is in flight,
// pgtx asks the server whether it committed ([Config].ResolveTimeout); when
// nothing can tell, the error matches [ErrCommitUnknown] and fn is not run
// again. Timeouts (57014, context errors, [ErrAcquireTimeout]) and all other
// errors end the call. fn must therefore be safe to run more than once:
// work outside the transaction (an HTTP call, a message) belongs in
// [AfterCommit]. [Attempt] tells fn which attempt it is.
//
// BEGIN is sent with fn's first statement, in the same write (a copy, a
// savepoint, Prepare, LargeObjects and Conn send it first, alone); a fn
// that sends nothing sends nothing, and the call succeeds. A BEGIN that
// fails fails the attempt, whatever fn does with the error.
//
// fn receives ctx and a [pgx.Tx] of this attempt only: once the attempt
// has ended, every method refuses with [pgx.ErrTxClosed] (Conn returns
// nil), so a tx that fn kept cannot run statements on a connection that
// is back in the pool. Its Commit and Rollback are refused:
// Transaction ends the transaction itself. fn calling them, or returning
// with rows still open, is an error matching [ErrInvalidArgument] that says
// so, and the transaction is rolled back: nothing is committed; so is
// calling Transaction again, on the same pool, with the ctx fn received
// (the error says "nested Transaction" and matches ErrInvalidArgument).
//
// A statement that ends the transaction is another matter: the server runs
// it as sent. A COMMIT or END commits fn's statements before it (rolls
// them back if the transaction had failed), a ROLLBACK or ABORT discards
// them, and the statements fn runs after it commit one by one. Transaction
// sees, when fn returns nil or an error, that the transaction has ended,
// and returns an error matching [ErrInvalidArgument] that says so and
// keeps fn's error: it commits and rolls back nothing more, and does not
// run fn again, which would commit that work twice. What such a COMMIT
// committed therefore stays committed, although the call returns an
// error. A BEGIN inside the transaction is a no-op the server warns about.
// COMMIT AND CHAIN and ROLLBACK AND CHAIN, or a COMMIT followed by a
// BEGIN, are not seen: they end fn's transaction as COMMIT and ROLLBACK
// do and open another, which Transaction takes for fn's. It commits that
// one when fn returns nil; on an error it rolls it back and may run fn
// again (committing again what the first COMMIT committed); and when
// COMMIT's answer is lost, the resolution asks about the first
// transaction, whose "committed" then makes the call return nil although
// the work after the chain may not have committed. Leave ending the
// transaction to Transaction.
//
// When ctx ends the call (the
// statement was cancelled, or a retry was due), errors.Is(err, ctx.Err())
// holds; an unknown COMMIT outcome or fn's own error that merely raced the
// cancellation keeps its class. If ctx has ended by the time fn returns
// nil, the transaction is rolled back, not committed. When ctx has a
// deadline, the server gets it too: the transaction's statement_timeout is
// the time left (never above the configured one), so the server stops the
// work even if this process dies. A panic in fn rolls back, releases the
// connection and propagates unchanged.
//
// After more than one attempt, or when a retry was refused, the error is a
// [*RetryError] that says how many attempts were made and why no more; so
// is the error of every call that ended on a server it could not connect
// to, whose message begins "pgtx: the server is unreachable".
func Transaction(ctx context.Context, pool *Pool, iso Isolation, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return TransactionWithOptions(ctx, pool, iso, Options{}, fn)
}

// TransactionWithOptions is [Transaction] with per-call [Options]: read-only
// and deferrable transactions, a statement timeout for this transaction
// only, retry caps, the retry of unique violations under SERIALIZABLE, and
// a label. Bad input (an unknown isolation level, a nil pool, a nil fn) is
// an error matching [ErrInvalidArgument] and sends nothing.
func TransactionWithOptions(ctx context.Context, pool *Pool, iso Isolation, opts Options, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if err := validateCall(ctx, pool, iso, fn); err != nil {
		return err
	}
	pool.queue.calls.Add(1)
	a := &txAttempt{pool: pool, iso: iso, opts: opts, fn: fn,
		uniqueAsConflict: opts.RetryUniqueViolations && iso == Serializable}
	a.parent = attemptOf(ctx)
	a.loop = retryLoop{
		policy:     &pool.settings.retry,
		clock:      pool.clock,
		maxRetries: pool.settings.retry.MaxRetries,
		budget:     pool.budget,
		tracer:     pool.settings.tracer,
		label:      opts.Label,
		isolation:  iso,
	}
	if pool.contention != nil {
		a.loop.gate = pool.contention.Gate(opts.Label)
	}
	if opts.MaxRetries != 0 {
		a.loop.maxRetries = defaultOrNone(opts.MaxRetries, 0)
	}
	a.loop.policy = opts.retryPolicy(a.loop.policy)
	var err error
	if pool.breaker == nil {
		err = a.loop.run(ctx, a.run)
	} else {
		err = pool.breaker.do(ctx, func(ctx context.Context) error { return a.loop.run(ctx, a.run) })
	}
	if err == nil {
		a.cur.afterCommit(ctx)
	}
	return err
}

// retryPolicy returns the retry policy of a call with these options on a
// pool whose policy is p: p itself, or a copy with the per-call overrides.
func (o Options) retryPolicy(p *RetryConfig) *RetryConfig {
	if o.MaxAdaptiveRetries == 0 && o.UnavailableTimeout == 0 {
		return p
	}
	policy := *p
	if o.MaxAdaptiveRetries != 0 {
		policy.MaxAdaptiveRetries = defaultOrNone(o.MaxAdaptiveRetries, 0)
	}
	if o.UnavailableTimeout != 0 {
		policy.UnavailableTimeout = defaultOrNone(o.UnavailableTimeout, 0)
	}
	return &policy
}

// TransactionValue is [TransactionWithOptions] for a fn that returns a
// value: the value of the attempt that committed, or the zero value with
// the error.
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
		return &invalidArgError{Msg: "nil context"}
	case pool == nil:
		return &invalidArgError{Msg: "nil pool"}
	case pool.pool == nil || pool.queue == nil:
		return errPoolNotOpened
	case fn == nil:
		return &invalidArgError{Msg: "nil fn"}
	case !iso.valid():
		return &invalidArgError{Msg: fmt.Sprintf("unknown isolation level %d: use ReadCommitted, RepeatableRead or Serializable", int(iso))}
	}
	if attemptOf(ctx).inside(pool) {
		return nestedError{}
	}
	return nil
}
