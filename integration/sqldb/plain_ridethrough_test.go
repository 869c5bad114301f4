package sqldb

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/integration/internal/itest"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// TestPlainStatementsRideOutAnOutage: while the server refuses
// connections for a second, a plain statement of the *sql.DB (and a
// transaction begun with db.BeginTx, as GORM begins its default ones)
// waits for the server within its deadline and runs once it is back, as
// pgtx.Pool's own statements do: nothing had been sent.
func TestPlainStatementsRideOutAnOutage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	direct := pgtxtest.NewDatabase(t)
	proxy := faultproxy.New(t, server.Shared(t).Addr())
	through, err := proxy.DSN(direct)
	if err != nil {
		t.Fatal(err)
	}
	admin := itest.DirectConn(t, direct)
	itest.Exec(t, ctx, admin, "create table sink (v int)")
	pool := itest.NewPool(t, through, nil)
	db := pgtxsql.OpenDB(pool)
	t.Cleanup(func() { db.Close() })

	proxy.RefuseNew(true)
	proxy.CutAll()
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(time.Second)
		proxy.RefuseNew(false)
	})
	t.Cleanup(wg.Wait)
	calls := plainCalls(db)
	errs := make([]error, len(calls))
	var cw sync.WaitGroup
	for i, c := range calls {
		cw.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			errs[i] = c.run(cctx)
		})
	}
	cw.Wait()
	for i, c := range calls {
		if errs[i] != nil {
			t.Errorf("%s: %v", c.name, errs[i])
		}
	}
	var n int
	if err := admin.QueryRow(ctx, "select count(*) from sink").Scan(&n); err != nil || n != len(calls) {
		t.Errorf("rows = %d (%v), want %d: each statement ran once", n, err, len(calls))
	}
}

// namedCall is a call a test makes, by name.
type namedCall struct {
	name string
	run  func(ctx context.Context) error
}

// plainCalls are a plain statement of db (ExecContext, QueryRowContext)
// and a transaction of its own (BeginTx, as GORM begins its default
// ones), each inserting one row (1 to 3) into a table sink (v int).
func plainCalls(db *sql.DB) []namedCall {
	return []namedCall{
		{"ExecContext", func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, "insert into sink values (1)")
			return err
		}},
		{"QueryRowContext", func(ctx context.Context) error {
			var v int
			return db.QueryRowContext(ctx, "insert into sink values (2) returning v").Scan(&v)
		}},
		{"BeginTx", func(ctx context.Context) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "insert into sink values (3)"); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		}},
	}
}
