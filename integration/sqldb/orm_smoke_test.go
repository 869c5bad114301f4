package sqldb

import (
	"context"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxgorm"
	"github.com/pgtx-go/pgtx/pgtxsqlx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"gorm.io/gorm"
)

type Account struct {
	ID      int64
	Balance int64
}

func TestORMSmoke(t *testing.T) {
	pool := pgtxtest.NewPool(t)
	ctx := context.Background()
	gdb, err := gorm.Open(pgtxgorm.Dialector(pool), &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := gdb.DB()
	t.Cleanup(func() { sqlDB.Close() })
	if err := gdb.AutoMigrate(&Account{}); err != nil {
		t.Fatal(err)
	}
	if err := gdb.Create(&Account{ID: 1, Balance: 100}).Error; err != nil {
		t.Fatal(err)
	}
	runs := 0
	err = pgtxgorm.Transaction(ctx, gdb, pgtx.Serializable, func(tx *gorm.DB) error {
		runs++
		if err := tx.Model(&Account{}).Where("id = ?", 1).Update("balance", gorm.Expr("balance - ?", 10)).Error; err != nil {
			return err
		}
		if runs == 1 {
			return tx.Exec("do $$ begin raise exception 'x' using errcode = '40001'; end $$").Error
		}
		return nil
	})
	if err != nil || runs != 2 {
		t.Fatalf("gorm: %v runs %d", err, runs)
	}
	xdb := pgtxsqlx.OpenDB(pool)
	t.Cleanup(func() { xdb.Close() })
	err = pgtxsqlx.Transaction(ctx, xdb, pgtx.Serializable, func(ctx context.Context, tx *sqlx.Tx) error {
		var a Account
		if err := tx.GetContext(ctx, &a, "select id, balance from accounts where id = $1", 1); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, tx.Rebind("update accounts set balance = ? where id = ?"), a.Balance-5, 1)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var a Account
	if err := gdb.First(&a, 1).Error; err != nil || a.Balance != 85 {
		t.Fatalf("%+v %v", a, err)
	}
}
