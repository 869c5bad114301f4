package pgtx

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/cancel"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// connState is everything pgtx keeps per connection of the main pool: how
// its statements are cancelled and what resolving its lost COMMITs needs.
// It is made with the connection (BuildContextWatcherHandler), filled in by
// AfterConnect before the connection is first handed out, and found again
// with [stateOf].
type connState struct {
	// cancel is the connection's context watcher handler.
	cancel cancel.Handler
	// res is what resolution needs of the connection's server, captured
	// when the connection was made ([resolve.Conn.Prepare]).
	res resolve.Conn
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

// setUp is the AfterConnect step of every main-pool connection, which
// fills in its state: in CancelModePool it captures the backend's identity
// and finds out whether the connection reaches its backend directly
// ([cancel.Handler.Capture]); in a resolving pool it captures the server's
// identity ([resolve.Conn.Prepare]); it notes the connection's QueryTracer
// and exec mode; then the connection is ready to be cancelled.
func (c *canceller) setUp(ctx context.Context, conn *pgx.Conn) error {
	st := stateOf(conn.PgConn())
	if st == nil {
		return nil
	}
	cc := conn.Config()
	st.tracer = cc.Tracer
	st.stmts.setMode(cc.DefaultQueryExecMode)
	if err := st.cancel.Capture(ctx, conn); err != nil {
		return err
	}
	if c.resolve {
		if err := st.res.Prepare(ctx, conn); err != nil {
			return err
		}
		if st.res.Capable && st.res.Direct && st.stmts.named {
			// The id reads of the first statements sent in the simple
			// protocol, prepared once: a connection that names its own
			// statements reaches its backend for its whole life.
			err := conn.PgConn().Exec(ctx, prepareXidSQL).Close()
			var pgErr *pgconn.PgError
			switch {
			case err == nil:
				st.stmts.xidPrepared = true
			case errors.As(err, &pgErr) && !endsSession(pgErr) && !conn.IsClosed():
				// Left unprepared: the reads go inline.
			default:
				return fmt.Errorf("pgtx: prepare the transaction id's read: %w", err)
			}
		}
	}
	st.cancel.SetReady()
	return nil
}
