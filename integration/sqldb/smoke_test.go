package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"github.com/pgtx-go/pgtx/pgtxtest"
)

func TestSmoke(t *testing.T) {
	pool := pgtxtest.NewPool(t)
	db := pgtxsql.OpenDB(pool)
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "create table t (id int primary key, n int, j jsonb, x numeric, ts timestamptz, u uuid)"); err != nil {
		t.Fatal(err)
	}
	runs := 0
	err := pgtxsql.Transaction(ctx, db, pgtx.Serializable, func(ctx context.Context, tx *sql.Tx) error {
		runs++
		if _, err := tx.ExecContext(ctx, "insert into t values ($1, $2, '{\"a\":1}', 1.25, now(), gen_random_uuid())", 1, 2); err != nil {
			return err
		}
		if runs == 1 {
			_, err := tx.ExecContext(ctx, "do $$ begin raise exception 'x' using errcode = '40001'; end $$")
			return err
		}
		var n int
		var j []byte
		var x string
		var ts time.Time
		var u string
		if err := tx.QueryRowContext(ctx, "select n, j, x, ts, u from t where id = $1", 1).Scan(&n, &j, &x, &ts, &u); err != nil {
			return err
		}
		t.Logf("n=%d j=%s x=%s ts=%v u=%s", n, j, x, ts, u)
		return nil
	})
	if err != nil || runs != 2 {
		t.Fatalf("err %v runs %d", err, runs)
	}
	var n int
	if err := db.QueryRowContext(ctx, "select count(*) from t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("count %d %v", n, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = pgtxsql.Transaction(cctx, db, pgtx.ReadCommitted, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "select pg_sleep(5)")
		return err
	})
	t.Logf("cancel: %v after %v; stats %+v", err, time.Since(start), pool.Stats())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want deadline: %v", err)
	}
}
