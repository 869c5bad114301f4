package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// resolveRounds is how many transactions each fault of TestResolveByFault
// hits.
const resolveRounds = 10

// TestResolveByFault: each kind of fault that leaves COMMIT's outcome
// unknown to the client hits resolveRounds transactions, one at a time, and
// every one must be resolved, and rightly: the row is in the ledger exactly
// once, fn ran once when the server had committed and twice when it had
// not, and no call returns ErrCommitUnknown. The kinds: the connection cut
// before COMMIT reaches the server (which never runs it), cut right after
// COMMIT is forwarded (which the server runs), COMMIT's answer dropped,
// the backend terminated while COMMIT runs a deferred trigger, and the
// server restarted (fast shutdown) at the same moment.
func TestResolveByFault(t *testing.T) {
	type fault struct {
		name string
		// committed: the server commits despite the fault.
		committed bool
		// slow: COMMIT runs a deferred trigger that sleeps, so the fault
		// can strike while it runs.
		slow bool
		// arm arms the fault for the next COMMIT; strike, when set, is
		// called with the backend's pid while that COMMIT runs.
		arm    func(p *faultproxy.Proxy)
		strike func(ctx context.Context, env *faultEnv, pid uint32) error
	}
	faults := []fault{
		{name: "cut before COMMIT", arm: func(p *faultproxy.Proxy) { p.CutBeforeForward(faultproxy.IsCommit, 1) }},
		{name: "cut after COMMIT", committed: true, arm: func(p *faultproxy.Proxy) { p.CutOnCommit(1) }},
		{name: "answer dropped", committed: true, arm: func(p *faultproxy.Proxy) { p.CutOnCommitReply(1) }},
		{name: "terminate", slow: true, strike: func(ctx context.Context, env *faultEnv, pid uint32) error {
			return terminateInCommit(ctx, env.admin, pid)
		}},
		{name: "restart", slow: true, strike: func(ctx context.Context, env *faultEnv, pid uint32) error {
			admin, err := pgx.Connect(ctx, env.direct)
			if err != nil {
				return err
			}
			err = waitInCommit(ctx, admin, pid)
			_ = admin.Close(ctx)
			if err != nil {
				return err
			}
			return env.srv.Restart(ctx, 100*time.Millisecond)
		}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			ctx := testCtx(t)
			env := newFaultEnv(t, f.name == "restart")
			mustExec(t, ctx, env.admin, "create table ledger (id text primary key)")
			if f.slow {
				mustExec(t, ctx, env.admin, `create function slow_commit() returns trigger language plpgsql as $$
					begin perform pg_sleep(0.3); return null; end $$`)
				mustExec(t, ctx, env.admin, `create constraint trigger slow after insert on ledger deferrable initially deferred
					for each row execute function slow_commit()`)
			}
			pool := newPool(t, env.through, func(c *pgtx.Config) {
				c.Retry.MaxRetries = 20
				c.Retry.MaxAdaptiveRetries = 8
			})
			var committed, aborted int
			for i := range resolveRounds {
				if f.arm != nil {
					f.arm(env.proxy)
				}
				id := fmt.Sprint("t-", i)
				var runs counter
				struck := make(chan error, 1)
				err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					if runs.inc() == 1 && f.strike != nil {
						pid := tx.Conn().PgConn().PID()
						go func() { struck <- f.strike(ctx, env, pid) }()
					}
					_, err := tx.Exec(ctx, "insert into ledger values ($1)", id)
					return err
				})
				if f.strike != nil {
					if err := <-struck; err != nil {
						t.Fatal(err)
					}
				}
				switch {
				case errors.Is(err, pgtx.ErrCommitUnknown):
					t.Errorf("round %d: unresolved: %v", i, err)
				case err != nil:
					t.Fatalf("round %d: %v", i, err)
				case runs.get() == 1:
					committed++
				default:
					aborted++
				}
				if n := env.count(t, ctx, "select count(*) from ledger where id = $1", id); n != 1 {
					t.Errorf("round %d: %s is in the ledger %d times, want once", i, id, n)
				}
			}
			r := pool.Stats().Resolved
			t.Logf("%s: %d ambiguous COMMITs, resolved %d (committed %d, aborted %d), unknown %d, backends ended %d",
				f.name, r.CommittedCount+r.AbortedCount+r.UnknownCount, r.CommittedCount+r.AbortedCount, r.CommittedCount, r.AbortedCount, r.UnknownCount, r.TerminatedCount)
			if r.CommittedCount != int64(committed) || r.AbortedCount != int64(aborted) || r.UnknownCount != 0 {
				t.Errorf("resolutions %+v; the calls saw %d committed, %d run again", r, committed, aborted)
			}
			switch {
			case f.committed && committed != resolveRounds:
				t.Errorf("%d of %d resolved committed; the server commits every one", committed, resolveRounds)
			case !f.committed && aborted != resolveRounds:
				t.Errorf("%d of %d resolved aborted; the server commits none", aborted, resolveRounds)
			}
		})
	}
}

// faultEnv is a database behind a fault proxy, with a direct admin
// connection and the server.
type faultEnv struct {
	srv     *server.Server
	proxy   *faultproxy.Proxy
	admin   *pgx.Conn
	direct  string
	through string
}

// newFaultEnv makes a faultEnv on the shared server, or on a dedicated one
// when the test restarts it.
func newFaultEnv(t *testing.T, dedicated bool) *faultEnv {
	t.Helper()
	srv := server.Shared(t)
	if dedicated {
		srv = server.New(t, nil)
	}
	direct := pgtxtest.NewDatabase(t, pgtxtest.WithServer(srv))
	proxy, through := proxyTo(t, srv.Addr(), direct)
	return &faultEnv{srv: srv, proxy: proxy, admin: directConn(t, direct), direct: direct, through: through}
}

// count runs a count query on a connection of its own: the admin
// connection does not survive a restart.
func (e *faultEnv) count(t *testing.T, ctx context.Context, sql string, args ...any) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, e.direct)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return queryInt(t, ctx, conn, sql, args...)
}

// waitInCommit waits (bounded) until backend pid runs COMMIT.
func waitInCommit(ctx context.Context, admin *pgx.Conn, pid uint32) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := admin.QueryRow(ctx, "select count(*) from pg_stat_activity where pid = $1 and state = 'active' and query = 'commit'", pid).Scan(&n)
		if err != nil {
			return err
		}
		if n == 1 {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return errors.New("the backend never ran COMMIT")
}
