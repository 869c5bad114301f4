package faultproxy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// The examples need a server, so they are compiled but not run. Each is the body of
// a test function, whose t they use, in a test package whose TestMain is
//
//	func TestMain(m *testing.M) { pgtxtest.Main(m) }

// deposit is the code under test: it adds amount to an account's balance and
// queues a message about it, in one transaction.
func deposit(ctx context.Context, pool *pgtx.Pool, account, amount int64) error {
	return pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, account); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO outbox (account, body) VALUES ($1, 'deposit')", account)
		return err
	})
}

// [Proxy.FailCommits] fails the next COMMITs; a plain pgx transaction sees the
// server's error and is rolled back.
func ExampleProxy_FailCommits() {
	var t *testing.T // the test's

	p := faultproxy.New(t, server.Shared(t).Addr())
	pool := pgtxtest.NewPool(t, pgtxtest.WithMigrationsDir("../testdata/migrations"), pgtxtest.WithProxy(p))
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "INSERT INTO accounts VALUES (1, 0)"); err != nil { // no COMMIT: not failed
		t.Fatal(err)
	}
	p.FailCommits(1, "40001")
	conn, err := pool.Pgxpool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = 10 WHERE id = 1")
		return err
	})
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "40001" {
		t.Fatalf("COMMIT: %v, want a serialization failure", err)
	}
	// The next COMMIT passes, and pgtx.Transaction retries a failed one.
	if err := deposit(ctx, pool, 1, 5); err != nil {
		t.Fatal(err)
	}
}

// [Proxy.SlowStatements] delays statements, to test that a deadline ends the wait.
func ExampleProxy_SlowStatements() {
	var t *testing.T // the test's

	srv := server.Shared(t)
	p := faultproxy.New(t, srv.Addr())
	dsn, err := p.DSN(pgtxtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	p.SlowStatements(faultproxy.MatchPrefix("select pg_database_size"), time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	err = conn.QueryRow(ctx, "select pg_database_size(current_database())").Scan(&size)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the deadline", err)
	}
}
