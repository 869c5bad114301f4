package hooks

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/acquire"
	"github.com/pgtx-go/pgtx/internal/cancel"
	"github.com/pgtx-go/pgtx/internal/connstate"
)

// Install installs on pc, the main pool's config, every hook pgtx needs,
// each wrapping the caller's own so that it keeps working:
//
//   - BuildContextWatcherHandler makes each connection's [connstate.State],
//     whose cancel handler (of c) stops a statement on the server when its
//     context ends (one set on the Config is replaced);
//   - AfterConnect fills the state in ([setUp]) before the caller's
//     AfterConnect;
//   - PrepareConn refuses a connection doomed by a cancel that was not
//     confirmed, or whose session the server ended while it was idle (a
//     restart's FATAL, [connstate.State.Ended]): pgxpool then hands out
//     another before anything is sent. Then it runs the caller's
//     PrepareConn, or BeforeAcquire (which pgxpool ignores once
//     PrepareConn is set);
//   - the connection tracer ([acquire.Tracer]) counts q's waiters,
//     and BeforeConnect gives each connection the caller's own tracer back;
//   - ShouldPing, BeforeConnect and PrepareConn mark the acquire's context
//     shared, as hooks may keep it ([acquire.MarkShared]);
//   - connected, when set, is told of every connection made and set up,
//     after the caller's AfterConnect.
func Install(pc *pgxpool.Config, c *cancel.Canceller, q *acquire.Queue, connected func()) {
	user := pc.ConnConfig.Tracer
	pc.ConnConfig.Tracer = acquire.NewTracer(q, user)
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
		if st := connstate.Of(conn.PgConn()); st != nil && (st.Cancel.Doomed() || st.Ended(conn.PgConn())) {
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
		if err := setUp(ctx, conn); err != nil {
			return err
		}
		if userAfterConnect != nil {
			if err := userAfterConnect(ctx, conn); err != nil {
				return err
			}
		}
		if connected != nil {
			connected()
		}
		return nil
	}

	pc.ConnConfig.BuildContextWatcherHandler = func(pgConn *pgconn.PgConn) ctxwatch.Handler {
		st := connstate.Attach(pgConn)
		st.Cancel.Init(c, pgConn, pgConn.Conn())
		return &st.Cancel
	}
}

// setUp is the AfterConnect step of every main-pool connection, which
// fills in its state: it notes the connection's QueryTracer and exec mode,
// in CancelModePool it captures the backend's identity and finds out
// whether the connection reaches its backend directly
// ([cancel.Handler.Capture]), then the connection is ready to be
// cancelled. What only a resolving pool's transactions need is captured at
// the connection's first transaction (txn.SetUp), not here: a new
// backend's catalog caches are cold, so each question asked now would
// delay every connect, a plain statement's too.
func setUp(ctx context.Context, conn *pgx.Conn) error {
	st := connstate.Of(conn.PgConn())
	if st == nil {
		return nil
	}
	cc := conn.Config()
	st.Tracer = cc.Tracer
	st.SetMode(cc.DefaultQueryExecMode)
	if err := st.Cancel.Capture(ctx, conn); err != nil {
		return err
	}
	st.Cancel.SetReady()
	return nil
}
