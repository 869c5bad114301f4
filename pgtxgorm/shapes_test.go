package pgtxgorm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxgorm"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// TestZeroishDB: a *gorm.DB a user can build by hand, or whose parts are
// nil, is refused with an error matching pgtx.ErrInvalidArgument that
// tells a GORM user how to open one; never a panic.
func TestZeroishDB(t *testing.T) {
	pool, err := pgtx.New(t.Context(), unreachable)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := openGORM(t, pgtxgorm.Dialector(pool))
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		db   func() *gorm.DB
	}{
		{"&gorm.DB{}", func() *gorm.DB { return &gorm.DB{} }},
		{"a Config only", func() *gorm.DB { return &gorm.DB{Config: &gorm.Config{}} }},
		{"an opened db's Config, no Statement", func() *gorm.DB { return &gorm.DB{Config: db.Config} }},
		{"an opened db's Statement, no Config", func() *gorm.DB { return &gorm.DB{Statement: db.Statement} }},
		{"an opened db's Config, an empty Statement", func() *gorm.DB {
			return &gorm.DB{Config: db.Config, Statement: &gorm.Statement{}}
		}},
		{"a Config with a pgtxsql ConnPool, not gorm.Open's", func() *gorm.DB {
			return &gorm.DB{Config: &gorm.Config{ConnPool: sqlDB}, Statement: &gorm.Statement{ConnPool: sqlDB}}
		}},
		{"a Config with a Dialector and a ConnPool, not gorm.Open's", func() *gorm.DB {
			return &gorm.DB{Config: &gorm.Config{ConnPool: sqlDB, Dialector: db.Dialector},
				Statement: &gorm.Statement{ConnPool: sqlDB}}
		}},
		{"an opened db's Config, a Statement of a nil ConnPool", func() *gorm.DB {
			return &gorm.DB{Config: &gorm.Config{Dialector: db.Dialector}, Statement: &gorm.Statement{}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := callRecovered(t.Context(), tt.db())
			if !errors.Is(err, pgtx.ErrInvalidArgument) {
				t.Fatalf("err = %v, want one matching pgtx.ErrInvalidArgument", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "pgtxgorm.Open") || !strings.Contains(msg, "pgtxgorm.Dialector") {
				t.Errorf("err = %q, want it to name pgtxgorm.Open and pgtxgorm.Dialector", msg)
			}
		})
	}
}

// callRecovered is pgtxgorm.Transaction on db, with a panic as an error.
func callRecovered(ctx context.Context, db *gorm.DB) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = panicError{p}
		}
	}()
	return pgtxgorm.Transaction(ctx, db, pgtx.Serializable, noop)
}

type panicError struct{ v any }

func (p panicError) Error() string {
	if e, ok := p.v.(error); ok {
		return "panic: " + e.Error()
	}
	return "panic"
}

// TestNotOursSaysHowToOpen: a *gorm.DB whose connections are not a
// pgtx.Pool's is refused with the GORM way to open one, as the same
// sentinel as before.
func TestNotOursSaysHowToOpen(t *testing.T) {
	cfg, err := pgx.ParseConfig(unreachable)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		db   *gorm.DB
	}{
		{"gorm.io/driver/postgres over pgx's stdlib", openGORM(t, postgres.New(postgres.Config{Conn: stdlib.OpenDB(*cfg)}))},
		{"Dialector(nil)", openGORM(t, pgtxgorm.Dialector(nil))},
		{"postgres.New over pgtxsql.OpenDB(nil)", openGORM(t, postgres.New(postgres.Config{Conn: pgtxsql.OpenDB(nil)}))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := pgtxgorm.Transaction(t.Context(), tt.db, pgtx.Serializable, noop)
			if !errors.Is(err, pgtx.ErrInvalidArgument) {
				t.Fatalf("err = %v, want one matching pgtx.ErrInvalidArgument", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "pgtxgorm.Open") || !strings.Contains(msg, "gorm.Open(pgtxgorm.Dialector(pool))") ||
				strings.Contains(msg, "pgtxsql") {
				t.Errorf("err = %q, want it to name pgtxgorm.Open and gorm.Open(pgtxgorm.Dialector(pool)), and not pgtxsql", msg)
			}
		})
	}
}
