package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
)

// TestConcurrentSerializableWithdrawalsBothApply is the seed guide's example:
// two read-modify-write withdrawals from one account under SERIALIZABLE. Both
// read the balance before either writes (coordinated by channels), so one
// fails with 40001; pgtx runs it again as a whole and both apply.
func TestConcurrentSerializableWithdrawalsBothApply(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	pool := newPool(t, dsn, nil)
	mustExec(t, ctx, pool, "create table accounts (id int primary key, balance int not null)")
	mustExec(t, ctx, pool, "insert into accounts values (1, 100)")

	var attempts counter
	var bothRead sync.WaitGroup
	bothRead.Add(2)
	withdraw := func(amount int) error {
		first := true
		return pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
			attempts.inc()
			var balance int
			if err := tx.QueryRow(ctx, "select balance from accounts where id = 1").Scan(&balance); err != nil {
				return err
			}
			if first { // only the first attempts wait for each other
				first = false
				bothRead.Done()
				bothRead.Wait()
			}
			if balance < amount {
				return errors.New("insufficient funds")
			}
			_, err := tx.Exec(ctx, "update accounts set balance = $1 where id = 1", balance-amount)
			return err
		})
	}
	errs := make(chan error, 2)
	go func() { errs <- withdraw(10) }()
	go func() { errs <- withdraw(20) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("withdraw: %v", err)
		}
	}
	conn := directConn(t, dsn)
	if got := queryInt(t, ctx, conn, "select balance from accounts where id = 1"); got != 70 {
		t.Errorf("balance = %d, want 70: both withdrawals must apply exactly once", got)
	}
	if got := attempts.get(); got != 3 {
		t.Errorf("attempts = %d, want 3 (one transaction ran again after 40001)", got)
	}
}

// TestDeadlockRetried makes a real deadlock: two transactions lock two rows in
// opposite order, each waiting (channels) until the other holds its first
// lock. Postgres aborts one with 40P01; pgtx runs it again and both apply.
func TestDeadlockRetried(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	pool := newPool(t, dsn, nil)
	mustExec(t, ctx, pool, "create table counters (id int primary key, n int not null)")
	mustExec(t, ctx, pool, "insert into counters values (1, 0), (2, 0)")

	var attempts counter
	var sawDeadlock sync.Once
	deadlocked := false
	var mu sync.Mutex
	var ends []string // how each attempt's second update ended
	var locked sync.WaitGroup
	locked.Add(2)
	run := func(first, second int) error {
		waited := false
		return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			attempts.inc()
			if _, err := tx.Exec(ctx, "update counters set n = n + 1 where id = $1", first); err != nil {
				return err
			}
			if !waited {
				waited = true
				locked.Done()
				locked.Wait()
			}
			_, err := tx.Exec(ctx, "update counters set n = n + 1 where id = $1", second)
			if sqlState(err) == pgerrcode.DeadlockDetected {
				sawDeadlock.Do(func() { deadlocked = true })
			}
			mu.Lock()
			ends = append(ends, fmt.Sprintf("%d->%d: %v", first, second, err))
			mu.Unlock()
			return err
		})
	}
	errs := make(chan error, 2)
	go func() { errs <- run(1, 2) }()
	go func() { errs <- run(2, 1) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("transaction: %v", err)
		}
	}
	if !deadlocked {
		t.Fatal("no 40P01 was raised: the test did not make a deadlock")
	}
	conn := directConn(t, dsn)
	if got := queryInt(t, ctx, conn, "select sum(n) from counters"); got != 4 {
		t.Errorf("sum = %d, want 4: both transactions apply exactly once", got)
	}
	if got := attempts.get(); got != 3 {
		t.Errorf("attempts = %d, want 3; the second updates ended %q", got, ends)
	}
}

func TestUniqueViolationNotRetried(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, newDB(t), nil)
	mustExec(t, ctx, pool, "create table t (id int primary key)")
	mustExec(t, ctx, pool, "insert into t values (1)")
	var attempts counter
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		attempts.inc()
		_, err := tx.Exec(ctx, "insert into t values (1)")
		return err
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("err = %v, want 23505", err)
	}
	if attempts.get() != 1 {
		t.Errorf("attempts = %d, want 1", attempts.get())
	}
}

type insufficientFunds struct{ account int }

func (e *insufficientFunds) Error() string { return "insufficient funds" }

func TestCallerErrorKeepsIdentityAndRollsBack(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	pool := newPool(t, dsn, nil)
	mustExec(t, ctx, pool, "create table t (id int primary key)")
	var attempts counter
	err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		attempts.inc()
		if _, err := tx.Exec(ctx, "insert into t values (1)"); err != nil {
			return err
		}
		return &insufficientFunds{account: 7}
	})
	var ife *insufficientFunds
	if !errors.As(err, &ife) || ife.account != 7 {
		t.Fatalf("err = %v, want the caller's *insufficientFunds", err)
	}
	if attempts.get() != 1 {
		t.Errorf("attempts = %d, want 1", attempts.get())
	}
	if n := queryInt(t, ctx, directConn(t, dsn), "select count(*) from t"); n != 0 {
		t.Errorf("rows = %d, want 0: the transaction must roll back", n)
	}
	if s := pool.Stats().Pool; s.AcquiredConns() != 0 || s.TotalConns() != 1 {
		t.Errorf("acquired = %d, total = %d: the connection must go back to the pool healthy", s.AcquiredConns(), s.TotalConns())
	}
}

func TestNonRetryableStopsRetries(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, newDB(t), func(c *pgtx.Config) { c.Retry.Jitter = func() float64 { return 0 } })
	tests := []struct {
		name         string
		wrap         func(error) error
		wantAttempts int64
	}{
		{"plain 40001 is retried up to MaxRetries", func(err error) error { return err }, 11},
		{"NonRetryable 40001 is not", pgtx.NonRetryable, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var attempts counter
			err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
				attempts.inc()
				_, err := tx.Exec(ctx, raise("40001"))
				return tt.wrap(err)
			})
			if sqlState(err) != "40001" {
				t.Fatalf("err = %v, want the 40001", err)
			}
			if got := attempts.get(); got != tt.wantAttempts {
				t.Errorf("attempts = %d, want %d", got, tt.wantAttempts)
			}
		})
	}
}

func TestStatementTimeoutNotRetried(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, newDB(t), func(c *pgtx.Config) { c.StatementTimeout = 300 * time.Millisecond })
	tests := []struct {
		name string
		opts pgtx.Options
	}{
		{"session statement_timeout", pgtx.Options{}},
		{"per-call SET LOCAL", pgtx.Options{StatementTimeout: 100 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var attempts counter
			err := pgtx.TransactionWithOptions(ctx, pool, pgtx.ReadCommitted, tt.opts, func(ctx context.Context, tx pgx.Tx) error {
				attempts.inc()
				_, err := tx.Exec(ctx, "select pg_sleep(3)")
				return err
			})
			if sqlState(err) != pgerrcode.QueryCanceled {
				t.Fatalf("err = %v, want 57014", err)
			}
			if pgtx.Classify(err) != pgtx.ClassTimeout || attempts.get() != 1 {
				t.Errorf("class = %v, attempts = %d; want timeout, 1", pgtx.Classify(err), attempts.get())
			}
		})
	}
	t.Run("plain pool query has the session limit", func(t *testing.T) {
		_, err := pool.Exec(ctx, "select pg_sleep(3)")
		if sqlState(err) != pgerrcode.QueryCanceled {
			t.Fatalf("err = %v, want 57014 from the session statement_timeout", err)
		}
	})
	t.Run("per-call timeout is local to its transaction", func(t *testing.T) {
		err := pgtx.TransactionWithOptions(ctx, pool, pgtx.ReadCommitted, pgtx.Options{StatementTimeout: 1234 * time.Millisecond},
			func(ctx context.Context, tx pgx.Tx) error {
				var v string
				if err := tx.QueryRow(ctx, "show statement_timeout").Scan(&v); err != nil {
					return err
				}
				if v != "1234ms" {
					t.Errorf("statement_timeout inside = %q, want 1234ms", v)
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		var v string
		if err := pool.QueryRow(ctx, "show statement_timeout").Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != "300ms" {
			t.Errorf("statement_timeout after = %q, want the session's 300ms", v)
		}
	})
}

func TestOverloadRetriedWithAdaptiveCap(t *testing.T) {
	ctx := testCtx(t)
	tests := []struct {
		name         string
		maxAdaptive  int
		wantAttempts int64
	}{
		{"default MaxAdaptiveRetries tries 3 times", 0, 3},
		{"MaxAdaptiveRetries 4 tries 5 times", 4, 5},
		{"negative MaxAdaptiveRetries tries once", -1, 1},
	}
	dsn := newDB(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := newPool(t, dsn, func(c *pgtx.Config) {
				c.Retry.MaxAdaptiveRetries = tt.maxAdaptive
				c.Retry.Jitter = func() float64 { return 0 }
			})
			var attempts counter
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				attempts.inc()
				_, err := tx.Exec(ctx, raise("53300"))
				return err
			})
			if sqlState(err) != "53300" || pgtx.Classify(err) != pgtx.ClassOverload {
				t.Fatalf("err = %v, want the 53300", err)
			}
			if got := attempts.get(); got != tt.wantAttempts {
				t.Errorf("attempts = %d, want %d", got, tt.wantAttempts)
			}
		})
	}
}

// TestSpecTimingJitter is the backpressure spec's timing test: the same
// failing call with jitter 0 and with jitter ~1 differ by the two backoffs,
// 0.2s + 0.4s = 0.6s.
func TestSpecTimingJitter(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	elapsed := func(jitter float64) time.Duration {
		pool := newPool(t, dsn, func(c *pgtx.Config) { c.Retry.Jitter = func() float64 { return jitter } })
		start := time.Now()
		err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, raise("53300"))
			return err
		})
		if sqlState(err) != "53300" {
			t.Fatalf("err = %v", err)
		}
		return time.Since(start)
	}
	noJitter := elapsed(0)
	fullJitter := elapsed(0.9999)
	diff := fullJitter - noJitter
	if diff < 500*time.Millisecond || diff > 1500*time.Millisecond {
		t.Errorf("jitter ~1 took %v, jitter 0 took %v: difference %v, want ~0.6s", fullJitter, noJitter, diff)
	}
}

func TestOverloadThenConflictsStopsAtThreeAttempts(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, newDB(t), func(c *pgtx.Config) { c.Retry.Jitter = func() float64 { return 0 } })
	var attempts counter
	err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		code := "40001"
		if attempts.inc() == 1 {
			code = "53300"
		}
		_, err := tx.Exec(ctx, raise(code))
		return err
	})
	if sqlState(err) != "40001" {
		t.Fatalf("err = %v, want the last error (40001)", err)
	}
	if got := attempts.get(); got != 3 {
		t.Errorf("attempts = %d, want 3: once an overload is seen MaxAdaptiveRetries caps every retry", got)
	}
}

// TestDeadlineBailOut: a retry whose backoff would end past the context's
// deadline is not attempted; the last database error is returned at once.
func TestDeadlineBailOut(t *testing.T) {
	pool := newPool(t, newDB(t), func(c *pgtx.Config) { c.Retry.Jitter = func() float64 { return 0.9999 } })
	if err := pool.Ping(testCtx(t)); err != nil { // warm: the attempt should not pay a connect
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 190*time.Millisecond)
	defer cancel()
	var attempts counter
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		attempts.inc()
		_, err := tx.Exec(ctx, raise("53300"))
		return err
	})
	if sqlState(err) != "53300" {
		t.Fatalf("err = %v, want the 53300", err)
	}
	if ctx.Err() != nil {
		t.Errorf("the call returned after the deadline; it must return at once when the backoff (200ms) cannot fit")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v: the deadline had not passed", err)
	}
	if attempts.get() != 1 {
		t.Errorf("attempts = %d, want 1", attempts.get())
	}
}
