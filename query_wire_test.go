package pgtx

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/internal/fakepg"
)

// TestQueryMethodsOverTheWire: the pool's query methods against a scripted
// server return what pgxpool's would, and give their connection back when
// their result is done: after every case the pool's one connection is idle
// again and serves the next.
func TestQueryMethodsOverTheWire(t *testing.T) {
	rows := fakepg.Answer{Columns: []fakepg.Column{{Name: "n", OID: 23}}, Rows: [][]any{{1}, {2}}}
	srv := &fakepg.Server{Answer: func(_ int, sql string) fakepg.Answer {
		if sql == "select n" {
			return rows
		}
		return fakepg.Answer{}
	}}
	p := fakePool(t, srv, func(c *Config) { c.MaxConns = 1 })
	ctx := context.Background()
	tests := []struct {
		name string
		use  func(t *testing.T) error
	}{
		{"Query, read to the end", func(t *testing.T) error {
			r, err := p.Query(ctx, "select n")
			if err != nil {
				return err
			}
			if len(r.FieldDescriptions()) != 1 || r.Conn() == nil || r.TypeMap() == nil {
				t.Errorf("rows: fields %v, conn %v, type map %v", r.FieldDescriptions(), r.Conn(), r.TypeMap())
			}
			var got []int32
			for r.Next() {
				var n int32
				if err := r.Scan(&n); err != nil {
					return err
				}
				got = append(got, n)
				if vals, err := r.Values(); err != nil || len(vals) != 1 || len(r.RawValues()) != 1 {
					t.Errorf("Values = %v, %v; RawValues %v", vals, err, r.RawValues())
				}
			}
			if !slices.Equal(got, []int32{1, 2}) || r.CommandTag().RowsAffected() != 2 {
				t.Errorf("rows %v, tag %q; want [1 2], SELECT 2", got, r.CommandTag())
			}
			return r.Err()
		}},
		{"Query, closed early", func(t *testing.T) error {
			r, err := p.Query(ctx, "select n")
			if err != nil {
				return err
			}
			r.Close()
			r.Close()
			return r.Err()
		}},
		{"QueryRow", func(t *testing.T) error {
			var n int32
			return p.QueryRow(ctx, "select n").Scan(&n)
		}},
		{"SendBatch", func(t *testing.T) error {
			b := &pgx.Batch{}
			b.Queue("select 1")
			b.Queue("select n")
			b.Queue("select n")
			br := p.SendBatch(ctx, b)
			if br.Tx() != nil {
				t.Error("a batch without BEGIN has a transaction")
			}
			if _, err := br.Exec(); err != nil {
				return err
			}
			r, err := br.Query()
			if err != nil {
				return err
			}
			r.Close()
			var n int32
			if err := br.QueryRow().Scan(&n); err != nil {
				return err
			}
			return br.Close()
		}},
		{"SendBatch that begins a transaction, committed", func(t *testing.T) error {
			b := &pgx.Batch{}
			b.BeginTx(pgx.TxOptions{})
			b.Queue("select 1")
			br := p.SendBatch(ctx, b)
			if err := br.Close(); err != nil {
				return err
			}
			return br.Tx().Commit(ctx)
		}},
		{"SendBatch that begins a transaction, rolled back", func(t *testing.T) error {
			b := &pgx.Batch{}
			b.BeginTx(pgx.TxOptions{})
			b.Queue("select 1")
			br := p.SendBatch(ctx, b)
			if err := br.Close(); err != nil {
				return err
			}
			return br.Tx().Rollback(ctx)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.use(t); err != nil {
				t.Fatal(err)
			}
			if s := p.pool.Stat(); s.AcquiredConns() != 0 {
				t.Fatalf("%d connections still acquired: the result did not give its connection back", s.AcquiredConns())
			}
			if _, err := p.Exec(ctx, "select 1"); err != nil {
				t.Fatalf("the next statement: %v", err)
			}
		})
	}
}
