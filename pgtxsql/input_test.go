package pgtxsql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxsql"
)

func noop(context.Context, *sql.Tx) error { return nil }

func begin(db *sql.DB) func(context.Context) (*sql.Tx, error) {
	return func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) }
}

func TestBadInput(t *testing.T) {
	pool := newPool(t)
	db := openDB(t, pool)
	noPool := openDB(t, nil)
	other := otherDB(t)
	var nilCtx context.Context

	tests := []struct {
		name string
		call func(ctx context.Context) error
		want error
	}{
		{"Transaction: nil db", func(ctx context.Context) error {
			return pgtxsql.Transaction(ctx, nil, pgtx.Serializable, noop)
		}, pgtx.ErrInvalidArgument},
		{"Transaction: a *sql.DB of another driver", func(ctx context.Context) error {
			return pgtxsql.Transaction(ctx, other, pgtx.Serializable, noop)
		}, pgtx.ErrInvalidArgument},
		{"Transaction: OpenDB(nil)", func(ctx context.Context) error {
			return pgtxsql.Transaction(ctx, noPool, pgtx.Serializable, noop)
		}, pgtx.ErrInvalidArgument},
		{"Transaction: nil fn", func(ctx context.Context) error {
			return pgtxsql.Transaction(ctx, db, pgtx.Serializable, nil)
		}, pgtx.ErrInvalidArgument},
		{"Transaction: unknown isolation", func(ctx context.Context) error {
			return pgtxsql.Transaction(ctx, db, pgtx.Isolation(99), noop)
		}, pgtx.ErrInvalidArgument},
		{"Transaction: nil ctx", func(context.Context) error {
			return pgtxsql.Transaction(nilCtx, db, pgtx.Serializable, noop)
		}, pgtx.ErrInvalidArgument},
		{"TransactionWithOptions: nil fn", func(ctx context.Context) error {
			return pgtxsql.TransactionWithOptions(ctx, db, pgtx.ReadCommitted, pgtx.Options{ReadOnly: true}, nil)
		}, pgtx.ErrInvalidArgument},
		{"Run: nil db", func(ctx context.Context) error {
			return pgtxsql.Run(ctx, nil, pgtx.Serializable, pgtx.Options{}, begin(db), noop)
		}, pgtx.ErrInvalidArgument},
		{"Run: a *sql.DB of another driver", func(ctx context.Context) error {
			return pgtxsql.Run(ctx, other, pgtx.Serializable, pgtx.Options{}, begin(other), noop)
		}, pgtx.ErrInvalidArgument},
		{"Run: nil begin", func(ctx context.Context) error {
			return pgtxsql.Run[*sql.Tx](ctx, db, pgtx.Serializable, pgtx.Options{}, nil, noop)
		}, pgtx.ErrInvalidArgument},
		{"Run: nil fn", func(ctx context.Context) error {
			return pgtxsql.Run(ctx, db, pgtx.Serializable, pgtx.Options{}, begin(db), nil)
		}, pgtx.ErrInvalidArgument},
		{"OpenDB(nil): Ping", func(ctx context.Context) error {
			return noPool.PingContext(ctx)
		}, pgtx.ErrInvalidArgument},
		{"OpenDB(nil): Exec", func(ctx context.Context) error {
			_, err := noPool.ExecContext(ctx, "select 1")
			return err
		}, pgtx.ErrInvalidArgument},
		{"OpenDB(nil): BeginTx", func(ctx context.Context) error {
			_, err := noPool.BeginTx(ctx, nil)
			return err
		}, pgtx.ErrInvalidArgument},
		{"BeginTx: an isolation PostgreSQL does not have", func(ctx context.Context) error {
			_, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelLinearizable})
			return err
		}, pgtx.ErrInvalidArgument},
		{"BeginTx: LevelWriteCommitted", func(ctx context.Context) error {
			_, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelWriteCommitted})
			return err
		}, pgtx.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(t.Context())
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want one matching %v", err, tt.want)
			}
		})
	}
}

func TestPool(t *testing.T) {
	pool := newPool(t)
	tests := []struct {
		name string
		db   *sql.DB
		want *pgtx.Pool
	}{
		{"nil", nil, nil},
		{"OpenDB(pool)", openDB(t, pool), pool},
		{"OpenDB(nil)", openDB(t, nil), nil},
		{"another driver's", otherDB(t), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pgtxsql.Pool(tt.db); got != tt.want {
				t.Errorf("Pool = %p, want %p", got, tt.want)
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
			db, err := pgtxsql.Open(t.Context(), tt.connString)
			if err == nil {
				_ = db.Close()
				t.Fatal("Open succeeded")
			}
			if db != nil {
				t.Errorf("Open returned a *sql.DB with its error %v", err)
			}
		})
	}

	// Open's *sql.DB owns its pool: closing it closes the pool.
	db, err := pgtxsql.Open(t.Context(), unreachable)
	if err != nil {
		t.Fatal(err)
	}
	if pgtxsql.Pool(db) == nil {
		t.Error("Pool of Open's *sql.DB is nil")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBadDBSaysWhat: a nil *sql.DB, one of another driver and one without a
// pool are refused as pgtx.ErrInvalidArgument, each with its own text.
func TestBadDBSaysWhat(t *testing.T) {
	noPool := openDB(t, nil)
	other := otherDB(t)
	tests := []struct {
		name string
		call func(ctx context.Context) error
		want string
	}{
		{"Transaction: nil db", func(ctx context.Context) error {
			return pgtxsql.Transaction(ctx, nil, pgtx.Serializable, noop)
		}, "pgtxsql: db is nil"},
		{"Run: nil db", func(ctx context.Context) error {
			return pgtxsql.Run(ctx, nil, pgtx.Serializable, pgtx.Options{}, begin(other), noop)
		}, "pgtxsql: db is nil"},
		{"Transaction: a *sql.DB of another driver", func(ctx context.Context) error {
			return pgtxsql.Transaction(ctx, other, pgtx.Serializable, noop)
		}, "pgtxsql: db was not opened by pgtxsql.Open or pgtxsql.OpenDB"},
		{"Transaction: OpenDB(nil)", func(ctx context.Context) error {
			return pgtxsql.Transaction(ctx, noPool, pgtx.Serializable, noop)
		}, "pgtxgorm.Dialector(pool)"},
		{"OpenDB(nil): Exec", func(ctx context.Context) error {
			_, err := noPool.ExecContext(ctx, "select 1")
			return err
		}, "pgtxgorm.Dialector(pool)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(t.Context())
			if !errors.Is(err, pgtx.ErrInvalidArgument) {
				t.Fatalf("err = %v, want one matching pgtx.ErrInvalidArgument", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %q, want it to say %q", err, tt.want)
			}
		})
	}
}
