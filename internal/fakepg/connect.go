package fakepg

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Connect returns a connection to s in exec mode mode, or fails t. At t's
// cleanup the connection is closed, pgconn's own goroutine (which may send
// a cancel request after a broken read) is waited for, and then every
// connection's goroutine of s ([Server.Wait]).
func (s *Server) Connect(t testing.TB, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	cc, err := pgx.ParseConfig(URL)
	if err != nil {
		t.Fatal(err)
	}
	s.Reach(&cc.Config)
	cc.DefaultQueryExecMode = mode
	conn, err := pgx.ConnectConfig(context.Background(), cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close(context.Background())
		<-conn.PgConn().CleanupDone()
		s.Wait()
	})
	return conn
}
