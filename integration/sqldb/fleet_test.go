package sqldb

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/integration/internal/itest"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// TestPlainStatementsWaitForAHeldConnection: once the server refused the
// pool a connect for lack of slots, its limit holds it at the connections
// it has, and a plain statement of the *sql.DB waits for one of them, as
// the pool's own statements and transactions do, instead of failing.
func TestPlainStatementsWaitForAHeldConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	srv := server.New(t, &server.Config{Settings: map[string]string{
		"max_connections": "2", "superuser_reserved_connections": "0",
	}})
	pool := itest.NewPool(t, srv.DSN(""), func(c *pgtx.Config) {
		c.MaxConns = 4
		c.CancelMode = pgtx.CancelModeProtocol // no cancel-pool connection in the count
	})
	db := pgtxsql.OpenDB(pool)
	t.Cleanup(func() { db.Close() })
	// Three transactions at once: the third connect is refused, and the
	// pool's limit drops to the two it holds.
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "select pg_sleep(0.2)")
				return err
			})
			if err != nil {
				t.Errorf("transaction: %v", err)
			}
		})
	}
	wg.Wait()
	if s := pool.Stats().Slots; s.Limit != 2 || s.RefusedCount == 0 {
		t.Fatalf("slots %+v: want the limit at the 2 connections held, after a refusal", s)
	}
	plain := []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"ExecContext", func(ctx context.Context) error { _, err := db.ExecContext(ctx, "select pg_sleep(0.01)"); return err }},
		{"QueryRowContext", func(ctx context.Context) error {
			var n int
			return db.QueryRowContext(ctx, "select 1 from pg_sleep(0.01)").Scan(&n)
		}},
		{"BeginTx", func(ctx context.Context) error {
			tx, err := db.BeginTx(ctx, &sql.TxOptions{})
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "select pg_sleep(0.01)"); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		}},
	}
	var mu sync.Mutex
	failed := map[string]int{}
	for _, p := range plain {
		for range 2 {
			wg.Go(func() {
				for range 10 {
					cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					err := p.run(cctx)
					cancel()
					if err != nil {
						mu.Lock()
						if failed[p.name] == 0 {
							t.Errorf("%s: %v", p.name, err)
						}
						failed[p.name]++
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Errorf("failed calls by kind: %v", failed)
	}
}
