package pgtxtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// NewPool makes a pgtx pool on a migrated database of its own, with the
// configuration changes asked for, and closes it when the test ends.
func TestNewPool(t *testing.T) {
	t.Parallel()
	admin := kittest.Connect(t, server.Shared(t).DSN(""))
	var pool *pgtx.Pool
	var database string
	t.Run("pool", func(t *testing.T) {
		pool = NewPool(t, WithMigrations(accountsMigrations),
			WithConfig(func(c *pgtx.Config) { c.MaxConns = 3 }),
			WithConfig(func(c *pgtx.Config) { c.ConnConfig.RuntimeParams["application_name"] = "pgtxtest-pool" }))
		if got := pool.Config().MaxConns; got != 3 {
			t.Errorf("MaxConns = %d, want 3", got)
		}
		ctx := testContext(t)
		err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO accounts VALUES (1, 'pool')")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM accounts").Scan(&n); err != nil || n != 2 {
			t.Errorf("accounts: %d rows, %v; want the seed row and the new one", n, err)
		}
		if err := pool.QueryRow(ctx, "SELECT current_database(), current_setting('application_name')").Scan(&database, new(string)); err != nil {
			t.Fatal(err)
		}
	})
	if err := pool.Ping(testContext(t)); err == nil {
		t.Error("the pool still answers after its test")
	}
	if database == "" || exists(t, admin, "database", database) {
		t.Errorf("database %q: want one, dropped after its test", database)
	}
}
