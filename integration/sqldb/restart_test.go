package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/integration/internal/itest"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// TestPlainStatementsAfterARestart: the server restarts while the
// *sql.DB's pool connections are idle, and is back before the next
// statements. Each idle connection holds the FATAL the shutdown sent it
// (57P01): it is seen before anything is sent, so a plain statement, a
// transaction of the connection's own and a Transaction each run once on
// a new connection, as with pgx's stdlib, whose database/sql retries a
// connection that was closed before the statement was sent.
func TestPlainStatementsAfterARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a server of its own")
	}
	const conns = 4
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	srv := server.New(t, nil)
	pool := itest.NewPool(t, srv.DSN(""), func(c *pgtx.Config) { c.MaxConns = conns })
	db := pgtxsql.OpenDB(pool)
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(ctx, "create table sink (v int)"); err != nil {
		t.Fatal(err)
	}
	calls := append(plainCalls(db), namedCall{
		"Transaction", func(ctx context.Context) error {
			runs := 0
			err := pgtxsql.Transaction(ctx, db, pgtx.ReadCommitted, func(ctx context.Context, tx *sql.Tx) error {
				runs++
				_, err := tx.ExecContext(ctx, "insert into sink values (4)")
				return err
			})
			if err == nil && runs != 1 {
				return fmt.Errorf("fn ran %d times, want once", runs)
			}
			return err
		}})
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			itest.FillIdle(t, ctx, pool, conns)
			if err := srv.Restart(ctx, 0); err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := c.run(cctx); err != nil {
				t.Errorf("%s after the restart: %v", c.name, err)
			}
		})
	}
	var n int
	if err := db.QueryRowContext(ctx, "select count(*) from sink").Scan(&n); err != nil || n != len(calls) {
		t.Errorf("rows = %d (%v), want %d: each ran once", n, err, len(calls))
	}
}
