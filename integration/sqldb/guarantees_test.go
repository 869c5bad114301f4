package sqldb

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxgorm"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"github.com/pgtx-go/pgtx/pgtxsqlx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"gorm.io/gorm"
)

// TestDeadlineGoesToTheServer: under a deadline, each module's transaction
// runs with a statement_timeout no longer than the time left, set with
// BEGIN (plus the 100ms by which the client's own cancel comes first), so
// the server ends a statement the client stopped waiting for.
func TestDeadlineGoesToTheServer(t *testing.T) {
	pool := pgtxtest.NewPool(t)
	db := pgtxsql.OpenDB(pool)
	t.Cleanup(func() { db.Close() })
	xdb := pgtxsqlx.OpenDB(pool)
	t.Cleanup(func() { xdb.Close() })
	gdb, err := gorm.Open(pgtxgorm.Dialector(pool), &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gsql, _ := gdb.DB()
	t.Cleanup(func() { gsql.Close() })

	const deadline = 3 * time.Second                                           // under the session's 5s, which a deadline never raises
	show := "select setting from pg_settings where name = 'statement_timeout'" // milliseconds
	runs := []struct {
		name string
		run  func(ctx context.Context) (string, error)
	}{
		{"pgtxsql", func(ctx context.Context) (s string, err error) {
			err = pgtxsql.Transaction(ctx, db, pgtx.ReadCommitted, func(ctx context.Context, tx *sql.Tx) error {
				return tx.QueryRowContext(ctx, show).Scan(&s)
			})
			return s, err
		}},
		{"pgtxsqlx", func(ctx context.Context) (s string, err error) {
			err = pgtxsqlx.Transaction(ctx, xdb, pgtx.ReadCommitted, func(ctx context.Context, tx *sqlx.Tx) error {
				return tx.GetContext(ctx, &s, show)
			})
			return s, err
		}},
		{"pgtxgorm", func(ctx context.Context) (s string, err error) {
			err = pgtxgorm.Transaction(ctx, gdb, pgtx.ReadCommitted, func(tx *gorm.DB) error {
				return tx.Raw(show).Scan(&s).Error
			})
			return s, err
		}},
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			s, err := r.run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ms, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("statement_timeout %q: want milliseconds", s)
			}
			if got := time.Duration(ms) * time.Millisecond; got <= 0 || got > deadline+100*time.Millisecond {
				t.Errorf("statement_timeout = %v, want the time left (≤ %v + 100ms)", got, deadline)
			}
		})
	}
}

// TestOneStats: the pool under each module counts its transactions in
// pgtx.Pool.Stats, which pgtxprom, pgtxotel and pgtxslog read.
func TestOneStats(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtxtest.NewPool(t)
	db := pgtxsql.OpenDB(pool)
	t.Cleanup(func() { db.Close() })
	if pgtxsql.Pool(db) != pool {
		t.Fatal("pgtxsql.Pool(db) is not the pool OpenDB was given")
	}
	before := pool.Stats().TransactionCount
	for range 3 {
		err := pgtxsql.Transaction(ctx, db, pgtx.ReadCommitted, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "select 1")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := pool.Stats().TransactionCount - before; n != 3 {
		t.Errorf("TransactionCount grew by %d, want 3", n)
	}
}
