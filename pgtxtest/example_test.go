package pgtxtest_test

import (
	"context"
	"embed"
	"io/fs"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// The examples need a server, so they are compiled but not run. Each is the body of
// a test function, whose t they use:
//
//	func TestDeposit(t *testing.T) { ... }
//
// and the test package's TestMain is
//
//	func TestMain(m *testing.M) { pgtxtest.Main(m) }

//go:embed testdata/migrations/*.sql
var embedded embed.FS

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

// A test gets a pool on a database of its own, with the schema of the migrations
// in testdata/migrations; parallel tests do not see each other's rows. (deposit is
// the code under test: a pgtx transaction that adds to a balance and queues a
// message in an outbox table.)
func Example() {
	var t *testing.T // the test's

	t.Parallel()
	pool := pgtxtest.NewPool(t, pgtxtest.WithMigrationsDir("testdata/migrations"))
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "INSERT INTO accounts VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	if err := deposit(ctx, pool, 1, 100); err != nil {
		t.Fatal(err)
	}
	var balance int64
	if err := pool.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = 1").Scan(&balance); err != nil {
		t.Fatal(err)
	}
	if balance != 100 {
		t.Errorf("balance %d, want 100", balance)
	}
}

// NewDatabase returns the DSN of a fresh database, for code that connects by
// itself. Migrations embedded in the test binary: fs.Sub makes their directory the
// root that WithMigrations reads.
func ExampleNewDatabase() {
	var t *testing.T // the test's

	migrations, err := fs.Sub(embedded, "testdata/migrations")
	if err != nil {
		t.Fatal(err)
	}
	dsn := pgtxtest.NewDatabase(t, pgtxtest.WithMigrations(migrations))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// ... run the code under test with dsn, check with conn ...
}

// WithMigrate runs a migration tool's Go API in the template database. The key names
// the version of what the function does: here, the tool's latest migration.
func ExampleWithMigrate() {
	var t *testing.T // the test's

	migrateUp := func(ctx context.Context, conn *pgx.Conn) error {
		// e.g. goose.UpContext(ctx, stdlib.OpenDB(*conn.Config()), "migrations")
		_, err := conn.Exec(ctx, "CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL)")
		return err
	}
	pool := pgtxtest.NewPool(t, pgtxtest.WithMigrate("schema v7", migrateUp))
	_ = pool
}

// NewPool takes pgtx configuration changes, here a smaller pool and a tighter
// statement timeout.
func ExampleWithConfig() {
	var t *testing.T // the test's

	pool := pgtxtest.NewPool(t,
		pgtxtest.WithMigrationsDir("testdata/migrations"),
		pgtxtest.WithConfig(func(c *pgtx.Config) {
			c.MaxConns = 2
			c.StatementTimeout = time.Second
		}))
	_ = pool
}

// With every transaction's first COMMIT failing, each transaction function runs
// twice: work done outside the transaction (here a counter standing for a message
// sent before the commit) shows up twice, and the database once.
func ExampleWithFailEveryCommitOnce() {
	var t *testing.T // the test's

	p := faultproxy.New(t, server.Shared(t).Addr())
	pool := pgtxtest.NewPool(t,
		pgtxtest.WithMigrationsDir("testdata/migrations"),
		pgtxtest.WithFailEveryCommitOnce("40001"),
		pgtxtest.WithProxy(p))
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "INSERT INTO accounts VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		sent.Add(1) // a side effect that a retry repeats: use pgtx.AfterCommit instead
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = 1")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if sent.Load() != 1 {
		t.Errorf("the message was sent %d times", sent.Load()) // this test fails: 2
	}
	t.Logf("%d COMMITs failed", p.Stats().InjectedFailures)
}
