package pgtxsqlx

import "github.com/pgtx-go/pgtx"

// invalidArg is a bad-input error: it matches [pgtx.ErrInvalidArgument].
type invalidArg string

func (e invalidArg) Error() string        { return pgtx.ErrInvalidArgument.Error() + ": " + string(e) }
func (e invalidArg) Is(target error) bool { return target == pgtx.ErrInvalidArgument }

// howToOpen is what a sqlx user does to get a *sqlx.DB that Transaction takes.
const howToOpen = "open it with pgtxsqlx.Open, or pgtxsqlx.OpenDB(pool) with a pool from pgtx.New"

const (
	errNilDB     = invalidArg("pgtxsqlx: db is nil: " + howToOpen)
	errEmptyDB   = invalidArg("pgtxsqlx: db has no *sql.DB (an empty sqlx.DB): " + howToOpen)
	errNotPooled = invalidArg("pgtxsqlx: db's connections are not a pgtx.Pool's, and its transactions would have none of pgtx's guarantees: " + howToOpen)
)
