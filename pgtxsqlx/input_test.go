package pgtxsqlx_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxsqlx"
)

// unreachable is a server nobody listens on: these tests send nothing, and
// a pool connects only when a statement needs a connection.
const unreachable = "postgres://app@127.0.0.1:1/app?connect_timeout=1"

// openDB returns pgtxsqlx.OpenDB(pool), closed by the test.
func openDB(t *testing.T, pool *pgtx.Pool) *sqlx.DB {
	t.Helper()
	db := pgtxsqlx.OpenDB(pool)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func noop(context.Context, *sqlx.Tx) error { return nil }

func TestBadInput(t *testing.T) {
	pool, err := pgtx.New(t.Context(), unreachable)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := openDB(t, pool)
	noPool := openDB(t, nil)
	cfg, err := pgx.ParseConfig(unreachable)
	if err != nil {
		t.Fatal(err)
	}
	// sqlx over pgx's own stdlib driver, not over pgtxsql.
	other := sqlx.NewDb(stdlib.OpenDB(*cfg), "pgx")
	t.Cleanup(func() { _ = other.Close() })

	tests := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Transaction: nil db", func(ctx context.Context) error {
			return pgtxsqlx.Transaction(ctx, nil, pgtx.Serializable, noop)
		}},
		{"Transaction: a *sqlx.DB with no *sql.DB", func(ctx context.Context) error {
			return pgtxsqlx.Transaction(ctx, &sqlx.DB{}, pgtx.Serializable, noop)
		}},
		{"Transaction: a *sqlx.DB of another driver", func(ctx context.Context) error {
			return pgtxsqlx.Transaction(ctx, other, pgtx.Serializable, noop)
		}},
		{"Transaction: OpenDB(nil)", func(ctx context.Context) error {
			return pgtxsqlx.Transaction(ctx, noPool, pgtx.Serializable, noop)
		}},
		{"Transaction: nil fn", func(ctx context.Context) error {
			return pgtxsqlx.Transaction(ctx, db, pgtx.Serializable, nil)
		}},
		{"Transaction: unknown isolation", func(ctx context.Context) error {
			return pgtxsqlx.Transaction(ctx, db, pgtx.Isolation(99), noop)
		}},
		{"TransactionWithOptions: nil fn", func(ctx context.Context) error {
			return pgtxsqlx.TransactionWithOptions(ctx, db, pgtx.ReadCommitted, pgtx.Options{ReadOnly: true}, nil)
		}},
		{"OpenDB(nil): Ping", func(ctx context.Context) error {
			return noPool.PingContext(ctx)
		}},
		{"OpenDB(nil): Get", func(ctx context.Context) error {
			var n int
			return noPool.GetContext(ctx, &n, "select 1")
		}},
		{"OpenDB(nil): Beginx", func(ctx context.Context) error {
			_, err := noPool.BeginTxx(ctx, nil)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(t.Context()); !errors.Is(err, pgtx.ErrInvalidArgument) {
				t.Fatalf("err = %v, want one matching pgtx.ErrInvalidArgument", err)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	tests := []struct {
		name, connString string
	}{
		{"not a connection string", "postgres://%zz"},
		{"unknown setting", "postgres://app@127.0.0.1:1/app?pool_max_conns=none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, err := pgtxsqlx.Open(t.Context(), tt.connString)
			if err == nil {
				_ = db.Close()
				t.Fatal("Open succeeded")
			}
			if db != nil {
				t.Errorf("Open returned a *sqlx.DB with its error %v", err)
			}
		})
	}

	db, err := pgtxsqlx.Open(t.Context(), unreachable)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// sqlx binds PostgreSQL's placeholders.
	if got := db.Rebind("select ? where ?"); got != "select $1 where $2" {
		t.Errorf("Rebind = %q, want $1 and $2", got)
	}
}

// TestBadDBSaysWhat: a nil *sqlx.DB, an empty one and one whose
// connections are not a pgtx.Pool's are refused as pgtx.ErrInvalidArgument,
// each told what it is and how a sqlx user opens one.
func TestBadDBSaysWhat(t *testing.T) {
	cfg, err := pgx.ParseConfig(unreachable)
	if err != nil {
		t.Fatal(err)
	}
	other := sqlx.NewDb(stdlib.OpenDB(*cfg), "pgx")
	t.Cleanup(func() { _ = other.Close() })
	tests := []struct {
		name string
		db   *sqlx.DB
		want []string
	}{
		{"nil", nil, []string{"pgtxsqlx: db is nil", "pgtxsqlx.Open"}},
		{"&sqlx.DB{}", &sqlx.DB{}, []string{"pgtxsqlx: db has no *sql.DB", "pgtxsqlx.Open"}},
		{"another driver's", other, []string{"pgtxsqlx: db's connections are not a pgtx.Pool's", "pgtxsqlx.Open", "pgtxsqlx.OpenDB(pool)"}},
		{"OpenDB(nil)", openDB(t, nil), []string{"pgtxsqlx: db's connections are not a pgtx.Pool's", "pgtxsqlx.OpenDB(pool)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := pgtxsqlx.Transaction(t.Context(), tt.db, pgtx.Serializable, noop)
			if !errors.Is(err, pgtx.ErrInvalidArgument) {
				t.Fatalf("err = %v, want one matching pgtx.ErrInvalidArgument", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %q, want it to say %q", err, w)
				}
			}
		})
	}
}
