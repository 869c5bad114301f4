package deferred

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/internal/errs"
	"github.com/pgtx-go/pgtx/internal/txn"
)

// Exec sends sql, a statement whose result fn does not read, in the write
// of the next statement fn sends on its [pgx.Tx], or with COMMIT when fn
// sends none: it costs no round trip of its own. ctx is the context fn of
// a [pgtx.Transaction] received, or one derived from it.
//
// The statement runs in order with fn's others, but its result cannot
// steer fn: a condition it depends on belongs in its SQL (a where clause,
// a check constraint). An error it meets ends the attempt as fn's own
// would: fn's next statement returns it, and whatever fn returns, a
// conflict runs the whole transaction again, any other error is the
// call's, and nothing commits. One that travels with COMMIT runs under
// COMMIT's bound, where the caller's cancellation does not reach it; the
// transaction's statement_timeout does.
//
// Exec must not be called concurrently with the methods of fn's tx, and
// a savepoint's statements see it only once fn's next statement on tx
// has sent it. Called with a context that is not fn's, or after fn
// returned, or with arguments that start with a pgx per-query option, it
// returns an error matching [pgtx.ErrInvalidArgument].
func Exec(ctx context.Context, sql string, args ...any) error {
	if ctx == nil {
		return invalidArg("Exec: nil context")
	}
	t, ok := ctx.Value(txn.RunningKey{}).(*txn.Tx)
	switch {
	case !ok:
		return invalidArg("Exec: ctx is not the context fn of a pgtx.Transaction received")
	case t == nil:
		return invalidArg("Exec: called after fn returned; defer statements while fn runs")
	}
	if err := t.Defer(ctx, sql, args); err != nil {
		if errors.Is(err, txn.ErrDeferOption) {
			return invalidArg("Exec: " + err.Error())
		}
		return err
	}
	return nil
}

// Transaction runs the statements of b as one transaction, in one write:
// BEGIN, the statements, and COMMIT, with every guarantee of
// [pgtx.TransactionWithOptions]: a conflict runs the whole batch again,
// an error commits nothing and is returned, the deadline goes to the
// server, and a lost COMMIT answer is resolved.
//
// The functions queued with b's statements (QueuedQuery.Exec, Query,
// QueryRow) run once, in order, after COMMIT succeeded, with the results
// of the attempt that committed: the first error they return is returned,
// wrapped, and the transaction has committed. An empty batch sends
// nothing. Bad input is an error matching [pgtx.ErrInvalidArgument] and
// sends nothing.
func Transaction(ctx context.Context, pool *pgtx.Pool, iso pgtx.Isolation, opts pgtx.Options, b *pgx.Batch) error {
	if b == nil {
		return invalidArg("Transaction: nil batch")
	}
	for i, qq := range b.QueuedQueries {
		if qq == nil {
			return invalidArg(fmt.Sprintf("Transaction: queued query %d is nil", i))
		}
		if err := txn.CheckDeferArgs(qq.Arguments); err != nil {
			return invalidArg(fmt.Sprintf("Transaction: queued query %d: %v", i, err))
		}
	}
	var fnErr error
	err := pgtx.TransactionWithOptions(ctx, pool, iso, opts, func(ctx context.Context, tx pgx.Tx) error {
		t, ok := tx.(*txn.Tx)
		if !ok {
			return pgtx.NonRetryable(fmt.Errorf("pgtx/deferred: fn's tx is %T, not pgtx's", tx))
		}
		kept := make([]*txn.Result, 0, len(b.QueuedQueries))
		for _, qq := range b.QueuedQueries {
			res, err := t.DeferKept(ctx, qq.SQL, qq.Arguments)
			if err != nil {
				return pgtx.NonRetryable(err) // a query rewriter's error
			}
			kept = append(kept, res)
		}
		t.OnCommitted(func(conn *pgx.Conn) { fnErr = runQueued(conn, b, kept) })
		return nil
	})
	if err != nil {
		return err
	}
	if fnErr != nil {
		return fmt.Errorf("pgtx/deferred: the batch committed, and a queued query's function failed: %w", fnErr)
	}
	return nil
}

func invalidArg(msg string) error { return &errs.InvalidArgError{Msg: "deferred." + msg} }
