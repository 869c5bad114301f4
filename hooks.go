package pgtx

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/acquire"
	"github.com/pgtx-go/pgtx/internal/connstate"
)

// installHooks installs on pc, the main pool's config, every hook pgtx
// needs, each wrapping the caller's own so that it keeps working:
//
//   - BuildContextWatcherHandler makes each connection's [connstate.State], whose
//     cancel handler stops a statement on the server when its context ends
//     (one set on the Config is replaced);
//   - AfterConnect fills the state in (the backend's identity, the
//     server's for resolution) before the caller's AfterConnect;
//   - PrepareConn refuses a connection doomed by a cancel that was not
//     confirmed, then runs the caller's PrepareConn, or BeforeAcquire (which
//     pgxpool ignores once PrepareConn is set);
//   - the connection tracer ([acquire.Tracer]) counts the pool's waiters,
//     and BeforeConnect gives each connection the caller's own tracer back;
//   - ShouldPing, BeforeConnect and PrepareConn mark the acquire's context
//     shared, as hooks may keep it ([acquire.MarkShared]).
func installHooks(pc *pgxpool.Config, c *canceller, q *queue) {
	user := pc.ConnConfig.Tracer
	pc.ConnConfig.Tracer = acquire.NewTracer(&q.Queue, user)
	userBeforeConnect := pc.BeforeConnect
	pc.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
		// The connect keeps what it derives from the acquire's context.
		acquire.MarkShared(ctx)
		cc.Tracer = user
		if userBeforeConnect != nil {
			return userBeforeConnect(ctx, cc)
		}
		return nil
	}

	if userPing := pc.ShouldPing; userPing != nil {
		pc.ShouldPing = func(ctx context.Context, params pgxpool.ShouldPingParams) bool {
			acquire.MarkShared(ctx)
			return userPing(ctx, params)
		}
	}

	userPrepare := pc.PrepareConn
	//lint:ignore SA1019 the caller's deprecated hook must keep working
	if before := pc.BeforeAcquire; userPrepare == nil && before != nil {
		userPrepare = func(ctx context.Context, conn *pgx.Conn) (bool, error) { return before(ctx, conn), nil }
	}
	pc.PrepareConn = func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		if st := connstate.Of(conn.PgConn()); st != nil && st.Cancel.Doomed() {
			return false, nil
		}
		if userPrepare != nil {
			acquire.MarkShared(ctx)
			return userPrepare(ctx, conn)
		}
		return true, nil
	}

	userAfterConnect := pc.AfterConnect
	pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if err := c.setUp(ctx, conn); err != nil {
			return err
		}
		if userAfterConnect != nil {
			return userAfterConnect(ctx, conn)
		}
		return nil
	}

	pc.ConnConfig.BuildContextWatcherHandler = func(pgConn *pgconn.PgConn) ctxwatch.Handler {
		st := connstate.Attach(pgConn)
		st.Cancel.Init(c.c, pgConn, pgConn.Conn())
		return &st.Cancel
	}
}
