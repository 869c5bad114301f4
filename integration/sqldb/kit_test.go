package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxgorm"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"github.com/pgtx-go/pgtx/pgtxsqlx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"gorm.io/gorm"
)

// The fault kit's WithFailEveryCommitOnce fails each transaction's first
// COMMIT, so every transaction function of the modules runs exactly twice,
// as pgtx.Transaction's do: also when its first query's text is new (the
// first attempt asks for result formats, the second need not) and when it
// makes a savepoint whose name GORM makes up at every attempt.
func TestFailEveryCommitOnceRunsEachTwice(t *testing.T) {
	// transfer is a repository's transfer in the library's own way: body
	// runs in its transaction.
	type transfer func(ctx context.Context, body txFunc) error
	tests := []struct {
		name string
		open func(t *testing.T, pool *pgtx.Pool) transfer
	}{
		{"pgtxsql", func(t *testing.T, pool *pgtx.Pool) transfer {
			db := pgtxsql.OpenDB(pool)
			t.Cleanup(func() { db.Close() })
			return func(ctx context.Context, body txFunc) error {
				return pgtxsql.Transaction(ctx, db, pgtx.Serializable, func(ctx context.Context, tx *sql.Tx) error {
					return body(ctx, sqlStmts{ctx, tx})
				})
			}
		}},
		{"pgtxsqlx", func(t *testing.T, pool *pgtx.Pool) transfer {
			db := pgtxsqlx.OpenDB(pool)
			t.Cleanup(func() { db.Close() })
			return func(ctx context.Context, body txFunc) error {
				return pgtxsqlx.Transaction(ctx, db, pgtx.Serializable, func(ctx context.Context, tx *sqlx.Tx) error {
					return body(ctx, sqlxStmts{ctx, tx})
				})
			}
		}},
		{"pgtxgorm, a nested transaction", func(t *testing.T, pool *pgtx.Pool) transfer {
			gdb, err := gorm.Open(pgtxgorm.Dialector(pool), &gorm.Config{})
			if err != nil {
				t.Fatal(err)
			}
			sqlDB, err := gdb.DB()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sqlDB.Close() })
			return func(ctx context.Context, body txFunc) error {
				return pgtxgorm.Transaction(ctx, gdb.WithContext(ctx), pgtx.Serializable, func(tx *gorm.DB) error {
					var n int64
					if err := tx.Raw("select count(*) from ledger").Scan(&n).Error; err != nil {
						return err
					}
					// GORM names the savepoint at random, at every
					// attempt.
					return tx.Transaction(func(tx *gorm.DB) error {
						return body(tx.Statement.Context, gormStmts{tx})
					})
				})
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pool := pgtxtest.NewPool(t, bankSchema, pgtxtest.WithFailEveryCommitOnce("40001"))
			ctx := t.Context()
			run := tc.open(t, pool)
			const transfers = 3
			for i := range transfers {
				// The query's text is new to the *sql.DB at each transfer.
				query := fmt.Sprintf("select balance /* transfer %d */ from accounts where id = ?", i)
				runs := 0
				err := run(ctx, func(ctx context.Context, s stmts) error {
					runs++
					balance, err := s.scalar(query, 1)
					if err != nil {
						return err
					}
					if err := s.exec("update accounts set balance = ? where id = ?", balance-10, 1); err != nil {
						return err
					}
					if err := s.exec("update accounts set balance = balance + 10 where id = ?", 2); err != nil {
						return err
					}
					return s.exec("insert into ledger (transfer, amount) values (?, ?)", fmt.Sprint("t", i), 10)
				})
				if err != nil || runs != 2 {
					t.Errorf("transfer %d: %v after %d runs of fn, want nil after 2 (the injected COMMIT failure, then the commit)", i, err, runs)
				}
			}
			var rows, balance int64
			if err := pool.QueryRow(ctx, "select count(*) from ledger").Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if err := pool.QueryRow(ctx, "select balance from accounts where id = 1").Scan(&balance); err != nil {
				t.Fatal(err)
			}
			if rows != transfers || balance != 1000-10*transfers {
				t.Errorf("%d ledger rows and account 1 at %d, want %d and %d: each transfer applied once", rows, balance, transfers, 1000-10*transfers)
			}
		})
	}
}
