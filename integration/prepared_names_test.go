package integration

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
)

// prepareItems returns an AfterConnect that prepares, on each connection,
// the statements of the shapes below, on table.
func prepareItems(table string) func(context.Context, *pgx.Conn) error {
	return func(ctx context.Context, conn *pgx.Conn) error {
		for name, sql := range map[string]string{
			"count_items": "select count(*) from " + table,
			"add_item":    "insert into " + table + " values ($1)",
			"add_seven":   "insert into " + table + " values (7)",
		} {
			if _, err := conn.Prepare(ctx, name, sql); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestStatementsPreparedAtConnect: a statement the caller prepared on each
// connection (in AfterConnect) runs by its name inside Transaction, as pgx
// runs it: as fn's first statement (the one that carries BEGIN) and after
// a first statement that only read (while the transaction's id is read
// with each statement), with and without arguments, in every exec mode.
// What pgx.BeginTxFunc on a plain pgxpool runs, pgtx runs (pgx itself
// refuses a batch of names in the simple protocol, and so does pgtx).
func TestStatementsPreparedAtConnect(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table items (id int primary key)")
	mustExec(t, ctx, admin, "create table items_pgx (id int primary key)")
	shapes := []struct {
		name string
		fn   func(ctx context.Context, tx pgx.Tx) error
	}{
		{"Exec with an argument first", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "add_item", 1)
			return err
		}},
		{"Exec without arguments first", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "add_seven")
			return err
		}},
		{"QueryRow first, then Exec", func(ctx context.Context, tx pgx.Tx) error {
			var n int64
			if err := tx.QueryRow(ctx, "count_items").Scan(&n); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "add_item", 100+n)
			return err
		}},
		{"a read first, then Query", func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "select 1"); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, "count_items")
			if err != nil {
				return err
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, "add_item", 200)
			return err
		}},
		{"a batch first", func(ctx context.Context, tx pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue("add_item", 2)
			b.Queue("count_items")
			return tx.SendBatch(ctx, b).Close()
		}},
	}
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			mustExec(t, ctx, admin, "truncate items, items_pgx")
			pool := newPool(t, dsn, func(c *pgtx.Config) {
				c.ConnConfig.DefaultQueryExecMode = mode
				c.AfterConnect = prepareItems("items")
			})
			pc, err := pgxpool.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			pc.ConnConfig.DefaultQueryExecMode = mode
			pc.AfterConnect = prepareItems("items_pgx")
			plain, err := pgxpool.NewWithConfig(ctx, pc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(plain.Close)
			for _, s := range shapes {
				errPgx := pgx.BeginTxFunc(ctx, plain, pgx.TxOptions{}, func(tx pgx.Tx) error { return s.fn(ctx, tx) })
				errPgtx := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, s.fn)
				if (errPgx == nil) != (errPgtx == nil) {
					t.Errorf("%s: pgtx %v, pgx.BeginTxFunc %v; want both to succeed or both to fail", s.name, errPgtx, errPgx)
				}
				if errPgx != nil && !(mode == pgx.QueryExecModeSimpleProtocol && s.name == "a batch first") {
					t.Errorf("%s: pgx.BeginTxFunc failed: %v", s.name, errPgx)
				}
			}
			got := queryInt(t, ctx, admin, "select count(*) from items")
			want := queryInt(t, ctx, admin, "select count(*) from items_pgx")
			if got != want {
				t.Errorf("pgtx inserted %d rows, pgx %d", got, want)
			}
			if got, want := fmt.Sprint(queryInt(t, ctx, admin, "select coalesce(sum(id), 0) from items")),
				fmt.Sprint(queryInt(t, ctx, admin, "select coalesce(sum(id), 0) from items_pgx")); got != want {
				t.Errorf("pgtx's rows sum to %s, pgx's to %s", got, want)
			}
		})
	}
}
