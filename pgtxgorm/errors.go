package pgtxgorm

import "github.com/pgtx-go/pgtx"

// invalidArg is a bad-input error: it matches [pgtx.ErrInvalidArgument].
type invalidArg string

func (e invalidArg) Error() string        { return pgtx.ErrInvalidArgument.Error() + ": " + string(e) }
func (e invalidArg) Is(target error) bool { return target == pgtx.ErrInvalidArgument }

const (
	errNilDB = invalidArg("pgtxgorm: db is nil: open it with pgtxgorm.Open or gorm.Open(pgtxgorm.Dialector(pool))")
	errNilFn = invalidArg("pgtxgorm: fn is nil")
)
