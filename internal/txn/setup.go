package txn

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/connstate"
)

// SetUp captures, before the first transaction of a resolving pool's
// connection (s), what resolving its COMMITs needs: the server's identity
// ([resolve.Conn.Prepare]) and the prepared id reads ([PrepareReads]). It
// runs once per connection, and not when the connection is made: a new
// backend's catalog caches are cold, which makes these questions cost more
// than the connect itself, and a connection that runs only plain
// statements never needs them. A question cancelled by ctx is an error and
// is asked again at the next transaction. A capture made tells
// s.Captured the server's run.
func SetUp(ctx context.Context, conn *pgx.Conn, s *Settings) error {
	if !s.Resolving {
		return nil
	}
	st := connstate.Of(conn.PgConn())
	if st == nil || st.Res.Asked {
		return nil
	}
	if err := st.Res.Prepare(ctx, conn); err != nil {
		return err
	}
	if s.Captured != nil && st.Res.Capable && st.Res.Run.Timeline != 0 {
		s.Captured(st.Res.System, st.Res.Run)
	}
	return PrepareReads(ctx, conn, st)
}

// PrepareReads prepares, on a connection whose state is st, the id
// reads of the first statements sent in the simple protocol
// (prepareXidSQL): a connection that names its own statements and reaches
// its backend directly keeps them for its whole life. A server error that
// leaves the session alive leaves them unprepared (the reads go inline);
// any other failure is the connection's.
func PrepareReads(ctx context.Context, conn *pgx.Conn, st *connstate.State) error {
	if !st.Res.Capable || !st.Res.Direct || !st.Named {
		return nil
	}
	err := conn.PgConn().Exec(ctx, prepareXidSQL(st.Res.Emit)).Close()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		st.XidPrepared = true
	case errors.As(err, &pgErr) && !classify.EndsSession(pgErr) && !conn.IsClosed():
		// Left unprepared: the reads go inline.
	default:
		return fmt.Errorf("pgtx: prepare the transaction id's read: %w", err)
	}
	return nil
}
