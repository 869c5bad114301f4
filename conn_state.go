package pgtx

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// connState is everything pgtx keeps per connection of the main pool: how
// its statements are cancelled and what resolving its lost COMMITs needs.
// It is made with the connection (BuildContextWatcherHandler), filled in by
// AfterConnect before the connection is first handed out, and found again
// with [stateOf].
type connState struct {
	// cancel is the connection's context watcher handler.
	cancel cancelHandler
	// res is what resolution needs of the connection's server, captured
	// when the connection was made (connResolve.prepare).
	res connResolve
	// tracer is the connection's pgx QueryTracer (nil: none), which sees
	// fn's first statement as pgx would show it: pgtx sends that one
	// itself, with BEGIN.
	tracer pgx.QueryTracer
	// stmts are the statements of its first writes (first_lean.go).
	stmts stmtCache
}

// connStateKey is where a connection's state is kept in PgConn.CustomData.
const connStateKey = "pgtx"

// stateOf returns the state pgtx keeps for pgConn, or nil for a connection
// that is not one of a pgtx pool's.
func stateOf(pgConn *pgconn.PgConn) *connState {
	st, _ := pgConn.CustomData()[connStateKey].(*connState)
	return st
}
