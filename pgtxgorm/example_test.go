package pgtxgorm_test

import (
	"context"
	"errors"
	"log"
	"os"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxgorm"
	"gorm.io/gorm"
)

type Account struct {
	ID      int64
	Balance int64
}

// Transaction in GORM's shape: fn gets a *gorm.DB on the attempt's
// transaction, may run more than once, and must not call Commit or
// Rollback.
func ExampleTransaction() {
	ctx := context.Background()
	db, err := pgtxgorm.Open(ctx, os.Getenv("DATABASE_URL"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		log.Fatal(err)
	}
	defer sqlDB.Close() // closes the pool Open made

	err = pgtxgorm.Transaction(ctx, db, pgtx.Serializable, func(tx *gorm.DB) error {
		var from Account
		if err := tx.First(&from, 1).Error; err != nil {
			return err
		}
		if from.Balance < 30 {
			return errors.New("insufficient funds") // not retried
		}
		if err := tx.Model(&Account{}).Where("id = ?", 1).Update("balance", gorm.Expr("balance - ?", 30)).Error; err != nil {
			return err
		}
		return tx.Model(&Account{}).Where("id = ?", 2).Update("balance", gorm.Expr("balance + ?", 30)).Error
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Dialector over a pool the program already has, per-call options, and
// work that must run once, after the commit.
func ExampleTransactionWithOptions() {
	ctx := context.Background()
	pool, err := pgtx.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	db, err := gorm.Open(pgtxgorm.Dialector(pool), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		log.Fatal(err)
	}
	defer sqlDB.Close() // the pool stays open

	err = pgtxgorm.TransactionWithOptions(ctx, db, pgtx.Serializable, pgtx.Options{Label: "signup"}, func(tx *gorm.DB) error {
		account := Account{Balance: 100}
		if err := tx.Create(&account).Error; err != nil {
			return err
		}
		// tx.Statement.Context is the attempt's: AfterCommit takes it.
		return pgtx.AfterCommit(tx.Statement.Context, func(context.Context) {
			log.Printf("account %d opened", account.ID)
		})
	})
	if err != nil {
		log.Fatal(err)
	}
}
