package hooks

import (
	"context"
	"crypto/tls"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/acquire"
	"github.com/pgtx-go/pgtx/internal/cancel"
	"github.com/pgtx-go/pgtx/internal/connstate"
	"github.com/pgtx-go/pgtx/internal/pgpool"
	"github.com/pgtx-go/pgtx/internal/slotlimit"
)

// Install installs on pc, the main pool's config, every hook pgtx needs,
// each wrapping the caller's own so that it keeps working:
//
//   - BeforeConnect, once the pool knows its server is behind Pgpool-II
//     (v), makes a connection that would name its statements
//     (QueryExecModeCacheStatement) describe them instead
//     (QueryExecModeCacheDescribe): Pgpool-II binds a named statement on
//     the node that parsed it, whatever the transaction it then runs in;
//   - BuildContextWatcherHandler makes each connection's [connstate.State],
//     whose cancel handler (of c) stops a statement on the server when its
//     context ends (one set on the Config is replaced);
//   - AfterConnect fills the state in ([setUp]) before the caller's
//     AfterConnect;
//   - PrepareConn refuses a connection doomed by a cancel that was not
//     confirmed, or whose session the server ended while it was idle (a
//     restart's FATAL, [connstate.State.Ended]), or that names its
//     statements behind Pgpool-II ([connstate.State].Retire): pgxpool
//     then hands out another before anything is sent. Then it runs the caller's
//     PrepareConn, or BeforeAcquire (which pgxpool ignores once
//     PrepareConn is set);
//   - PrepareConn also restores the session's statement_timeout that a
//     balanced read-only transaction behind Pgpool-II set, when the
//     transaction's end could not ([connstate.State].RestoreTimeout);
//   - the connection tracer ([acquire.Tracer]) counts q's waiters,
//     and BeforeConnect gives each connection the caller's own tracer back;
//   - ShouldPing, BeforeConnect and PrepareConn mark the acquire's context
//     shared, as hooks may keep it ([acquire.MarkShared]);
//   - connected, when set, is told of every connection made and set up,
//     after the caller's AfterConnect;
//   - lim keeps the pool within the slots the server gives it: its
//     BeforeConnect step runs first, before the caller's hook can fetch a
//     credential for a connect it holds back, its AfterConnect step last,
//     and the connection tracer tells it of every release.
func Install(pc *pgxpool.Config, c *cancel.Canceller, q *acquire.Queue, v *pgpool.Verdict, lim *slotlimit.Limit, connected func()) {
	installConnect(pc, q, v, lim)
	installPrepare(pc)
	installAfterConnect(pc, v, func(ctx context.Context) {
		lim.Connected(ctx)
		if connected != nil {
			connected()
		}
	})
	pc.ConnConfig.BuildContextWatcherHandler = func(pgConn *pgconn.PgConn) ctxwatch.Handler {
		st := connstate.Attach(pgConn)
		st.Cancel.Init(c, pgConn, pgConn.Conn())
		return &st.Cancel
	}
}

// installConnect traces the acquires through q, and gives a connect the
// caller's tracer and BeforeConnect; behind Pgpool-II (v) a statement
// cache becomes a describe cache.
func installConnect(pc *pgxpool.Config, q *acquire.Queue, v *pgpool.Verdict, lim *slotlimit.Limit) {
	user := pc.ConnConfig.Tracer
	tracer := acquire.NewTracer(q, user)
	tracer.Acquired, tracer.Released = lim.Acquired, lim.Released
	pc.ConnConfig.Tracer = tracer
	userBeforeConnect := pc.BeforeConnect
	pc.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
		if err := lim.Connecting(ctx); err != nil {
			return err
		}
		// The connect keeps what it derives from the acquire's context.
		acquire.MarkShared(ctx)
		cc.Tracer = user
		if userBeforeConnect != nil {
			if err := userBeforeConnect(ctx, cc); err != nil {
				return err
			}
		}
		if cc.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement && v.Pgpool() {
			cc.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		}
		return nil
	}
	if userPing := pc.ShouldPing; userPing != nil {
		pc.ShouldPing = func(ctx context.Context, params pgxpool.ShouldPingParams) bool {
			acquire.MarkShared(ctx)
			return userPing(ctx, params)
		}
	}
}

// installPrepare refuses a connection a cancellation doomed, one retired
// or ended, and one whose statement_timeout cannot be restored, before
// the caller's PrepareConn (or deprecated BeforeAcquire) sees it.
func installPrepare(pc *pgxpool.Config) {
	userPrepare := pc.PrepareConn
	//lint:ignore SA1019 the caller's deprecated hook must keep working
	if before := pc.BeforeAcquire; userPrepare == nil && before != nil {
		userPrepare = func(ctx context.Context, conn *pgx.Conn) (bool, error) { return before(ctx, conn), nil }
	}
	pc.PrepareConn = func(ctx context.Context, conn *pgx.Conn) (bool, error) {
		st := connstate.Of(conn.PgConn())
		if st != nil && (st.Cancel.Doomed() || st.Retire || st.Ended(conn.PgConn())) {
			return false, nil
		}
		if st != nil && st.RestoreTimeout && !restoreTimeout(ctx, conn.PgConn(), st) {
			return false, nil
		}
		if userPrepare != nil {
			acquire.MarkShared(ctx)
			return userPrepare(ctx, conn)
		}
		return true, nil
	}
}

// installAfterConnect sets a new connection up for pgtx before the
// caller's AfterConnect, then tells connected that the server answers.
func installAfterConnect(pc *pgxpool.Config, v *pgpool.Verdict, connected func(context.Context)) {
	userAfterConnect := pc.AfterConnect
	pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if err := setUp(ctx, conn, v); err != nil {
			return err
		}
		if userAfterConnect != nil {
			if err := userAfterConnect(ctx, conn); err != nil {
				return err
			}
		}
		connected(ctx)
		return nil
	}
}

// setUp is the AfterConnect step of every main-pool connection, which
// fills in its state: it notes the connection's QueryTracer and exec mode,
// asks which backends answer it ([pgpool.Identify]: one round trip), and,
// when another than the connection's own answers, whether Pgpool-II is in
// front ([pgpool.Verdict.Decide], asked once per pool); then it tells the
// cancel handler which backend the cancel pool can signal, and the
// connection is ready to be cancelled. What only a resolving pool's
// transactions need is captured at the connection's first transaction
// (txn.SetUp), not here: a new backend's catalog caches are cold, so each
// question asked now would delay every connect, a plain statement's too.
func setUp(ctx context.Context, conn *pgx.Conn, v *pgpool.Verdict) error {
	st := connstate.Of(conn.PgConn())
	if st == nil {
		return nil
	}
	cc := conn.Config()
	st.Tracer = cc.Tracer
	st.SetMode(cc.DefaultQueryExecMode)
	pgConn := conn.PgConn()
	p, err := pgpool.Identify(ctx, pgConn)
	if err != nil {
		return fmt.Errorf("pgtx: identify the connection's backends: %w", err)
	}
	pid := pgConn.PID()
	switch {
	case !p.OK:
		// A server that cannot tell: the protocol cancel reaches it.
	case !p.Pooled(pid):
		st.Cancel.SetTarget(cancel.Target{PID: pid, Start: p.Balanced.Start})
	default:
		if st.Pgpool, err = v.Decide(ctx, pgConn); err != nil {
			return fmt.Errorf("pgtx: ask what is in front of the server: %w", err)
		}
		if st.Pgpool {
			// The primary's backend runs every statement but a balanced
			// one, which is cancelled on the standby that runs it.
			target := cancel.Target{PID: p.Primary.PID, Start: p.Primary.Start, WhileActive: true}
			if p.Balanced.PID != p.Primary.PID {
				addr, err := pgpool.BalancedNode(ctx, pgConn)
				if err != nil {
					return fmt.Errorf("pgtx: ask Pgpool-II for the session's node: %w", err)
				}
				if addr != "" {
					_, tls := pgConn.Conn().(*tls.Conn)
					target.Standby = &cancel.Standby{Addr: addr, PID: p.Balanced.PID, Start: p.Balanced.Start,
						OwnKey: p.Balanced.PID == pid && !tls}
				}
			}
			st.Cancel.SetTarget(target)
			st.PinReadOnly = v.BalancesStatements()
			st.Retire = st.Named
		}
	}
	st.Cancel.SetReady()
	return nil
}

// restoreTimeout restores the session's statement_timeout on a connection
// whose balanced read-only transaction behind Pgpool-II left it set, and
// reports whether it could.
func restoreTimeout(ctx context.Context, pgConn *pgconn.PgConn, st *connstate.State) bool {
	res, err := pgpool.Run(ctx, pgConn, "reset statement_timeout")
	if err != nil || res[0].Err != nil {
		return false
	}
	st.RestoreTimeout = false
	return true
}
