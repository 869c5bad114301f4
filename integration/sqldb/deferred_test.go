package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/deferred"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"github.com/pgtx-go/pgtx/pgtxtest"
)

// TestDeferredThroughDatabaseSQL: the context fn of pgtxsql.Transaction
// receives takes deferred statements: they run in order with the
// *sql.Tx's statements, commit with them, and a deferred statement's
// error ends the attempt, with nothing committed, whatever fn returns.
func TestDeferredThroughDatabaseSQL(t *testing.T) {
	pool := pgtxtest.NewPool(t)
	db := pgtxsql.OpenDB(pool)
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "create table d (id int primary key, n int not null check (n >= 0))"); err != nil {
		t.Fatal(err)
	}
	var seen int
	err := pgtxsql.Transaction(ctx, db, pgtx.ReadCommitted, func(ctx context.Context, tx *sql.Tx) error {
		if err := deferred.Exec(ctx, "insert into d values ($1, $2)", 1, 5); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, "select count(*) from d").Scan(&seen); err != nil {
			return err
		}
		return deferred.Exec(ctx, "insert into d values ($1, $2)", 2, 5)
	})
	if err != nil || seen != 1 {
		t.Fatalf("err = %v, fn's query saw %d rows; want the deferred one", err, seen)
	}
	err = pgtxsql.Transaction(ctx, db, pgtx.ReadCommitted, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "insert into d values (3, 1)"); err != nil {
			return err
		}
		if err := deferred.Exec(ctx, "update d set n = n - 10 where id = $1", 1); err != nil {
			return err
		}
		_, _ = tx.ExecContext(ctx, "select 1") // swallowed
		return nil
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
		t.Fatalf("err = %v, want the deferred update's check violation", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "select count(*) from d").Scan(&n); err != nil || n != 2 {
		t.Errorf("%d rows (%v), want the first call's 2", n, err)
	}
}
