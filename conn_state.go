package pgtx

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/internal/connstate"
	"github.com/pgtx-go/pgtx/internal/txn"
)

// setUp is the AfterConnect step of every main-pool connection, which
// fills in its state: in CancelModePool it captures the backend's identity
// and finds out whether the connection reaches its backend directly
// ([cancel.Handler.Capture]); in a resolving pool it captures the server's
// identity ([resolve.Conn.Prepare]) and prepares the transaction id's reads
// ([txn.PrepareReads]); it notes the connection's QueryTracer
// and exec mode; then the connection is ready to be cancelled.
func (c *canceller) setUp(ctx context.Context, conn *pgx.Conn) error {
	st := connstate.Of(conn.PgConn())
	if st == nil {
		return nil
	}
	cc := conn.Config()
	st.Tracer = cc.Tracer
	st.Stmts.SetMode(cc.DefaultQueryExecMode)
	if err := st.Cancel.Capture(ctx, conn); err != nil {
		return err
	}
	if c.resolve {
		if err := st.Res.Prepare(ctx, conn); err != nil {
			return err
		}
		if err := txn.PrepareReads(ctx, conn, st); err != nil {
			return err
		}
	}
	st.Cancel.SetReady()
	return nil
}
