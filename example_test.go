package pgtx_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
)

// withdraw is repository code: a read-modify-write that conflicts under
// SERIALIZABLE when two run at once. pgtx runs the loser again as a whole.
func withdraw(ctx context.Context, pool *pgtx.Pool, account, amount int64) error {
	return pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		var balance int64
		if err := tx.QueryRow(ctx, "select balance from accounts where id = $1", account).Scan(&balance); err != nil {
			return err
		}
		if balance < amount {
			return ErrInsufficientFunds // not retried; errors.Is works on the result
		}
		_, err := tx.Exec(ctx, "update accounts set balance = $1 where id = $2", balance-amount, account)
		return err
	})
}

func ExampleTransaction() {
	ctx := context.Background()
	pool, err := pgtx.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	err = withdraw(ctx, pool, 1, 10)
	switch {
	case errors.Is(err, ErrInsufficientFunds):
		fmt.Println("declined")
	case errors.Is(err, pgtx.ErrCommitUnknown):
		fmt.Println("may have committed: check before doing it again")
	case err != nil:
		fmt.Println("failed:", err)
	}
}

func ExampleNonRetryable() {
	ctx := context.Background()
	var pool *pgtx.Pool // from pgtx.New
	_ = func() error {
		return pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "select reserve_seat($1)", 42)
			if pgtx.SQLState(err) == pgtx.CodeSerializationFailure {
				// This seat is contended: tell the user now rather than retry.
				return pgtx.NonRetryable(err)
			}
			return err
		})
	}
}

func ExampleClassify() {
	errs := []error{
		&pgconn.PgError{Code: "40001"},
		&pgconn.PgError{Code: "53300"},
		fmt.Errorf("insert: %w", &pgconn.PgError{Code: "23505"}),
		&pgconn.PgError{Code: "57014"},
		context.DeadlineExceeded,
		pgtx.NonRetryable(&pgconn.PgError{Code: "40P01"}),
		pgconn.ErrConnClosed,
	}
	for _, err := range errs {
		fmt.Printf("%-10s %-16s retried: %v\n", pgtx.SQLState(err), pgtx.Classify(err), pgtx.IsRetryable(err))
	}
	// Output:
	// 40001      conflict         retried: true
	// 53300      overload         retried: true
	// 23505      permanent        retried: false
	// 57014      timeout          retried: false
	//            timeout          retried: false
	// 40P01      permanent        retried: false
	//            connection_lost  retried: true
}

func ExampleBreaker() {
	br, err := pgtx.NewBreaker(pgtx.BreakerConfig{Name: "analytics", ConsecutiveFailures: 3, OpenFor: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	lost := fmt.Errorf("read: %w", pgconn.ErrConnClosed) // what a dead analytics store returns
	for i := 1; i <= 4; i++ {
		err := br.Do(context.Background(), func(ctx context.Context) error { return lost })
		fmt.Printf("call %d: open=%v state=%v\n", i, errors.Is(err, pgtx.ErrCircuitOpen), br.State())
	}
	// Output:
	// call 1: open=false state=closed
	// call 2: open=false state=closed
	// call 3: open=false state=open
	// call 4: open=true state=open
}

// retryLogger is a minimal pgtx.Tracer: it reports every retry.
type retryLogger struct{}

func (retryLogger) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	return ctx
}

func (retryLogger) TraceAttemptEnd(_ context.Context, d pgtx.TraceAttemptEndData) {
	if d.Retry {
		fmt.Printf("%s: attempt %d failed (%v), retrying in %v\n", d.Label, d.Attempt, d.Class, d.Backoff)
	}
}

func ExampleTracer() {
	cfg, err := pgtx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.Tracer = retryLogger{} // or pgtxslog.New(logger, nil), pgtxotel.New()
	pool, err := pgtx.NewWithConfig(context.Background(), cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	_ = pgtx.TransactionWithOptions(context.Background(), pool, pgtx.TxOptions{Isolation: pgtx.Serializable, Label: "transfer"},
		func(ctx context.Context, tx pgx.Tx) error { return nil })
}
