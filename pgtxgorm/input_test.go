package pgtxgorm_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxgorm"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// unreachable is a server nobody listens on: these tests send nothing, and
// a pool connects only when a statement needs a connection.
const unreachable = "postgres://app@127.0.0.1:1/app?connect_timeout=1"

// noPing is GORM's configuration without its ping at Open, which would
// connect.
var noPing = &gorm.Config{DisableAutomaticPing: true}

// openGORM returns gorm.Open(d, noPing), its *sql.DB closed by the test.
func openGORM(t *testing.T, d gorm.Dialector) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(d, noPing)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	return db
}

func noop(*gorm.DB) error { return nil }

func TestBadInput(t *testing.T) {
	pool, err := pgtx.New(t.Context(), unreachable)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := openGORM(t, pgtxgorm.Dialector(pool))
	noPool := openGORM(t, pgtxgorm.Dialector(nil))
	cfg, err := pgx.ParseConfig(unreachable)
	if err != nil {
		t.Fatal(err)
	}
	// GORM over pgx's own stdlib driver, as gorm.io/driver/postgres opens it.
	other := openGORM(t, postgres.New(postgres.Config{Conn: stdlib.OpenDB(*cfg)}))

	tests := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Transaction: nil db", func(ctx context.Context) error {
			return pgtxgorm.Transaction(ctx, nil, pgtx.Serializable, noop)
		}},
		{"Transaction: a *gorm.DB of another driver", func(ctx context.Context) error {
			return pgtxgorm.Transaction(ctx, other, pgtx.Serializable, noop)
		}},
		{"Transaction: Dialector(nil)", func(ctx context.Context) error {
			return pgtxgorm.Transaction(ctx, noPool, pgtx.Serializable, noop)
		}},
		{"Transaction: nil fn", func(ctx context.Context) error {
			return pgtxgorm.Transaction(ctx, db, pgtx.Serializable, nil)
		}},
		{"Transaction: unknown isolation", func(ctx context.Context) error {
			return pgtxgorm.Transaction(ctx, db, pgtx.Isolation(99), noop)
		}},
		{"TransactionWithOptions: nil fn", func(ctx context.Context) error {
			return pgtxgorm.TransactionWithOptions(ctx, db, pgtx.ReadCommitted, pgtx.Options{ReadOnly: true}, nil)
		}},
		{"Dialector(nil): a query", func(ctx context.Context) error {
			var n int
			return noPool.WithContext(ctx).Raw("select 1").Scan(&n).Error
		}},
		{"Dialector(nil): GORM's own Transaction", func(ctx context.Context) error {
			return noPool.WithContext(ctx).Transaction(noop)
		}},
		{"Dialector(nil): gorm.Open's ping", func(context.Context) error {
			db, err := gorm.Open(pgtxgorm.Dialector(nil))
			if err == nil {
				sqlDB, _ := db.DB()
				_ = sqlDB.Close()
			}
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
		// gorm.Open pings: nothing listens there.
		{"no server", unreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db, err := pgtxgorm.Open(t.Context(), tt.connString)
			if err == nil {
				if sqlDB, err := db.DB(); err == nil {
					_ = sqlDB.Close()
				}
				t.Fatal("Open succeeded")
			}
			if db != nil {
				t.Errorf("Open returned a *gorm.DB with its error %v", err)
			}
		})
	}

	db, err := pgtxgorm.Open(t.Context(), unreachable, noPing)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlDB.Close(); err != nil {
		t.Fatal(err)
	}
}
