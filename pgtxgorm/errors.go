package pgtxgorm

import (
	"github.com/pgtx-go/pgtx"
	"gorm.io/gorm"
)

// invalidArg is a bad-input error: it matches [pgtx.ErrInvalidArgument].
type invalidArg string

func (e invalidArg) Error() string        { return pgtx.ErrInvalidArgument.Error() + ": " + string(e) }
func (e invalidArg) Is(target error) bool { return target == pgtx.ErrInvalidArgument }

// howToOpen is what a GORM user does to get a *gorm.DB that Transaction takes.
const howToOpen = "open it with pgtxgorm.Open, or gorm.Open(pgtxgorm.Dialector(pool)) with a pool from pgtx.New"

const (
	errNilDB     = invalidArg("pgtxgorm: db is nil: " + howToOpen)
	errNotGORM   = invalidArg("pgtxgorm: db was not made by gorm.Open (its Config, Statement, callbacks or connections are missing): " + howToOpen)
	errNotPooled = invalidArg("pgtxgorm: db's connections are not a pgtx.Pool's, and its transactions would have none of pgtx's guarantees: " + howToOpen)
	errNilFn     = invalidArg("pgtxgorm: fn is nil")
)

// errTxDB refuses a GORM transaction's *gorm.DB. It matches
// [pgtx.ErrInvalidArgument] and, as GORM's own refusal did,
// [gorm.ErrInvalidTransaction].
type errTxDB struct{}

func (errTxDB) Error() string {
	return pgtx.ErrInvalidArgument.Error() + ": pgtxgorm: db is a transaction's (db.Begin's, or the tx of db.Transaction or of pgtxgorm.Transaction): " +
		"pass the *gorm.DB of pgtxgorm.Open or gorm.Open(pgtxgorm.Dialector(pool)); inside fn, use fn's tx, and tx.Transaction for a savepoint"
}

func (errTxDB) Is(target error) bool {
	return target == pgtx.ErrInvalidArgument || target == gorm.ErrInvalidTransaction
}
