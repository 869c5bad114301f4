package db_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/examples/repository/db"
)

// One set of generated queries serves the pool (plain reads) and the
// transaction pgtx.Transaction hands to fn (q.WithTx(tx)).
var (
	_ db.DBTX = (*pgtx.Pool)(nil)
	_ db.DBTX = (pgx.Tx)(nil)
)

// copyRecorder is a DBTX that records what CopyFrom receives.
type copyRecorder struct {
	db.DBTX // the other methods are not called
	table   pgx.Identifier
	columns []string
	rows    [][]any
}

func (c *copyRecorder) CopyFrom(_ context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	c.table, c.columns = table, columns
	for src.Next() {
		v, err := src.Values()
		if err != nil {
			return 0, err
		}
		c.rows = append(c.rows, v)
	}
	return int64(len(c.rows)), src.Err()
}

func TestCreateAccountsCopiesEveryRow(t *testing.T) {
	rec := &copyRecorder{}
	n, err := db.New(rec).CreateAccounts(context.Background(), []db.CreateAccountsParams{
		{Owner: "alice", Balance: 500}, {Owner: "bob", Balance: 300}, {Owner: "carol", Balance: 200},
	})
	if err != nil || n != 3 {
		t.Fatalf("CreateAccounts = %d, %v; want 3, nil", n, err)
	}
	if !slices.Equal(rec.table, pgx.Identifier{"accounts"}) || !slices.Equal(rec.columns, []string{"owner", "balance"}) {
		t.Errorf("CopyFrom(%v, %v), want accounts (owner, balance)", rec.table, rec.columns)
	}
	want := [][]any{{"alice", int64(500)}, {"bob", int64(300)}, {"carol", int64(200)}}
	if !slices.EqualFunc(rec.rows, want, slices.Equal) {
		t.Errorf("rows %v, want %v", rec.rows, want)
	}

	rec = &copyRecorder{}
	if n, err := db.New(rec).CreateAccounts(context.Background(), nil); err != nil || n != 0 || len(rec.rows) != 0 {
		t.Errorf("CreateAccounts(nil) = %d, %v, rows %v; want 0, nil, none", n, err, rec.rows)
	}
}
