package pgtx_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
)

var ErrInsufficientFunds = errors.New("insufficient funds")

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
	var retried *pgtx.RetryError
	switch {
	case errors.Is(err, ErrInsufficientFunds):
		fmt.Println("declined")
	case errors.Is(err, pgtx.ErrCommitUnknown):
		fmt.Println("may have committed: check before doing it again")
	case errors.As(err, &retried):
		fmt.Printf("failed after %d attempts: %v\n", retried.Attempts, retried.Err)
	case err != nil:
		fmt.Println("failed:", err)
	}
}

func ExampleTransactionValue() {
	ctx := context.Background()
	var pool *pgtx.Pool // from pgtx.New
	balance, err := pgtx.TransactionValue(ctx, pool, pgtx.RepeatableRead, pgtx.Options{ReadOnly: true},
		func(ctx context.Context, tx pgx.Tx) (int64, error) {
			var b int64
			err := tx.QueryRow(ctx, "select balance from accounts where id = $1", 1).Scan(&b)
			return b, err
		})
	fmt.Println(balance, err)
}

func ExampleAfterCommit() {
	ctx := context.Background()
	var pool *pgtx.Pool // from pgtx.New
	sendReceipt := func(ctx context.Context, order int64) { /* an email, a message */ }
	_ = pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		var order int64
		if err := tx.QueryRow(ctx, "insert into orders (item) values ($1) returning id", "book").Scan(&order); err != nil {
			return err
		}
		// fn may run several times; the receipt goes once, after COMMIT.
		return pgtx.AfterCommit(ctx, func(ctx context.Context) { sendReceipt(ctx, order) })
	})
}

func ExampleAttempt() {
	ctx := context.Background()
	var pool *pgtx.Pool // from pgtx.New
	_ = pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		if n := pgtx.Attempt(ctx); n > 1 {
			fmt.Println("running again, attempt", n)
		}
		_, err := tx.Exec(ctx, "update counters set n = n + 1 where id = 1")
		return err
	})
}

func ExampleNonRetryable() {
	ctx := context.Background()
	var pool *pgtx.Pool // from pgtx.New
	_ = func() error {
		return pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "select reserve_seat($1)", 42)
			if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == pgerrcode.SerializationFailure {
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
		fmt.Printf("%-16s retried: %v\n", pgtx.Classify(err), pgtx.Classify(err).Retryable())
	}
	// Output:
	// conflict         retried: true
	// overload         retried: true
	// permanent        retried: false
	// timeout          retried: false
	// timeout          retried: false
	// permanent        retried: false
	// connection_lost  retried: true
}

func ExampleConfig() {
	// A *pgxpool.Config built the way the team already builds it (an IAM
	// token in BeforeConnect, a tracer, custom TLS) is adopted as it is.
	poolConfig, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	poolConfig.MaxConns = 20
	cfg := &pgtx.Config{Config: poolConfig, AcquireTimeout: time.Second}
	pool, err := pgtx.NewWithConfig(context.Background(), cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
}

func ExampleConfig_breaker() {
	// A breaker is for a database the application can do without.
	cfg, err := pgtx.ParseConfig(os.Getenv("ANALYTICS_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.Breaker = &pgtx.BreakerConfig{Name: "analytics", ConsecutiveFailures: 3, OpenFor: time.Minute}
	pool, err := pgtx.NewWithConfig(context.Background(), cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	err = pgtx.Transaction(context.Background(), pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "insert into page_views (path) values ($1)", "/")
		return err
	})
	if errors.Is(err, pgtx.ErrCircuitOpen) || pool.BreakerState() == pgtx.BreakerOpen {
		fmt.Println("analytics is down: skipped")
	}
}

// retryLogger is a minimal pgtx.TransactionTracer: it reports every retry.
type retryLogger struct{}

func (retryLogger) TraceTransactionStart(ctx context.Context, _ pgtx.TraceTransactionStartData) context.Context {
	return ctx
}

func (retryLogger) TraceTransactionEnd(context.Context, pgtx.TraceTransactionEndData) {}

func (retryLogger) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	return ctx
}

func (retryLogger) TraceAttemptEnd(_ context.Context, d pgtx.TraceAttemptEndData) {
	if d.Retry {
		fmt.Printf("%s: attempt %d failed (%v), retrying in %v\n", d.Label, d.Attempt, d.Class, d.Backoff)
	}
}

func ExampleTransactionTracer() {
	cfg, err := pgtx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.Tracer = retryLogger{} // or pgtxslog.NewTracer(), pgtxotel.NewTracer()
	pool, err := pgtx.NewWithConfig(context.Background(), cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	_ = pgtx.TransactionWithOptions(context.Background(), pool, pgtx.Serializable, pgtx.Options{Label: "transfer"},
		func(ctx context.Context, tx pgx.Tx) error { return nil })
}

// ExampleContentionConfig shows the contention manager's state for the
// label of a hot kind of transaction, and how to switch it off.
func ExampleContentionConfig() {
	ctx := context.Background()
	cfg, err := pgtx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	// The default: on, limiting a label once more than 10% of its attempts
	// conflict. Threshold -1 switches the manager off.
	cfg.Contention = pgtx.ContentionConfig{Threshold: 0.2}
	pool, err := pgtx.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	_ = pgtx.TransactionWithOptions(ctx, pool, pgtx.Serializable, pgtx.Options{Label: "transfer"},
		func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "update accounts set balance = balance + 1 where id = 1")
			return err
		})
	for _, s := range pool.Stats().Contention {
		if s.Limiting {
			fmt.Printf("%s: %d at once, %d waiting, wait p99 %v\n", s.Label, s.Limit, s.Waiting, s.Wait.Quantile(0.99))
		}
	}
}
