package sqldb

import (
	"errors"
	"strings"
	"testing"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxgorm"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"gorm.io/gorm"
)

// serverGORM is gorm.Open(pgtxgorm.Dialector(pool), cfg), pool on a
// database of the test's own with a table accounts, from the kit.
func serverGORM(t *testing.T, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	pool := pgtxtest.NewPool(t)
	if _, err := pool.Exec(t.Context(), "create table accounts (id bigint primary key, balance bigint not null)"); err != nil {
		t.Fatal(err)
	}
	db, err := gorm.Open(pgtxgorm.Dialector(pool), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

// TestTransactionsDB: the *gorm.DB of a GORM transaction is refused with an
// error that matches pgtx.ErrInvalidArgument, and gorm.ErrInvalidTransaction
// as before, and says which *gorm.DB to pass.
func TestTransactionsDB(t *testing.T) {
	db := serverGORM(t, &gorm.Config{})
	tests := []struct {
		name string
		call func(t *testing.T) error
	}{
		{"db.Begin()", func(t *testing.T) error {
			tx := db.WithContext(t.Context()).Begin()
			if tx.Error != nil {
				t.Fatal(tx.Error)
			}
			defer tx.Rollback()
			return pgtxgorm.Transaction(t.Context(), tx, pgtx.Serializable, func(*gorm.DB) error { return nil })
		}},
		{"inside db.Transaction", func(t *testing.T) error {
			var err error
			_ = db.WithContext(t.Context()).Transaction(func(tx *gorm.DB) error {
				err = pgtxgorm.Transaction(t.Context(), tx, pgtx.Serializable, func(*gorm.DB) error { return nil })
				return nil
			})
			return err
		}},
		{"fn's tx", func(t *testing.T) error {
			var err error
			_ = pgtxgorm.Transaction(t.Context(), db, pgtx.Serializable, func(tx *gorm.DB) error {
				err = pgtxgorm.Transaction(t.Context(), tx, pgtx.Serializable, func(*gorm.DB) error { return nil })
				return nil
			})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(t)
			if !errors.Is(err, pgtx.ErrInvalidArgument) || !errors.Is(err, gorm.ErrInvalidTransaction) {
				t.Fatalf("err = %v, want one matching pgtx.ErrInvalidArgument and gorm.ErrInvalidTransaction", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "transaction") || !strings.Contains(msg, "gorm.Open(pgtxgorm.Dialector(pool))") {
				t.Errorf("err = %q, want it to say db is a transaction's and name gorm.Open(pgtxgorm.Dialector(pool))", msg)
			}
		})
	}
}

// TestCommitInFn: fn's tx.Commit and tx.Rollback are refused with a text
// that names no other package's function.
func TestCommitInFn(t *testing.T) {
	db := serverGORM(t, &gorm.Config{})
	tests := []struct {
		name string
		end  func(tx *gorm.DB) *gorm.DB
	}{
		{"Commit", (*gorm.DB).Commit},
		{"Rollback", (*gorm.DB).Rollback},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var inner error
			err := pgtxgorm.Transaction(t.Context(), db, pgtx.Serializable, func(tx *gorm.DB) error {
				if err := tx.Create(&Account{ID: 1, Balance: 1}).Error; err != nil {
					return err
				}
				inner = tt.end(tx).Error
				return nil
			})
			for _, e := range []error{inner, err} {
				if !errors.Is(e, pgtx.ErrInvalidArgument) {
					t.Fatalf("err = %v, want one matching pgtx.ErrInvalidArgument", e)
				}
				if msg := e.Error(); strings.Contains(msg, "pgtxsql") || !strings.Contains(msg, "tx."+tt.name) {
					t.Errorf("err = %q, want it to name tx.%s and not pgtxsql", msg, tt.name)
				}
			}
			var n int64
			if err := db.WithContext(t.Context()).Model(&Account{}).Count(&n).Error; err != nil || n != 0 {
				t.Errorf("%d accounts (%v), want 0: nothing committed", n, err)
			}
		})
	}
}
