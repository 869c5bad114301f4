package integration

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// iamStyle adapts cfg as a team that fetches credentials per connection
// does: the connection string names a role that cannot log in, and the
// caller's BeforeConnect hook supplies the real one, as an IAM token hook
// supplies the password. It returns how many connects the hook saw.
func iamStyle(cfg *pgtx.Config) *atomic.Int64 {
	var calls atomic.Int64
	user := cfg.ConnConfig.User
	cfg.ConnConfig.User = "pgtx_no_such_role"
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		calls.Add(1)
		cc.User = user
		return nil
	}
	return &calls
}

// TestBeforeConnectReachesTheCancelPool: the cancel pool connects with the
// caller's BeforeConnect too, so a statement cancelled by its deadline is
// cancelled over the cancel pool (pg_cancel_backend), not by the protocol
// fallback after the cancel pool failed to log in.
func TestBeforeConnectReachesTheCancelPool(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, newDB(t), func(c *pgtx.Config) { iamStyle(c) })
	// The connection is made first: under load, connecting alone can take
	// the statement's 100ms, and then nothing is sent to cancel.
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	qctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := pgtx.Transaction(qctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "select pg_sleep(5)")
		return err
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the deadline", err)
	}
	if s := pool.Stats().Cancels; s.SignalledCount != 1 || s.PoolErrorCount != 0 {
		t.Errorf("cancels = %+v: want one signalled over the cancel pool, no cancel-pool error", s)
	}
}

// TestBeforeConnectReachesTheResolver: outside CancelModePool, the
// connection made to ask what became of a lost COMMIT runs the caller's
// BeforeConnect too, so the COMMIT is resolved instead of being
// ErrCommitUnknown.
func TestBeforeConnectReachesTheResolver(t *testing.T) {
	ctx := testCtx(t)
	direct, proxy, through := proxied(t)
	admin := directConn(t, direct)
	mustExec(t, ctx, admin, "create table ledger (transfer_id text primary key)")
	var calls *atomic.Int64
	pool := newPool(t, through, func(c *pgtx.Config) {
		c.CancelMode = pgtx.CancelModeProtocol
		calls = iamStyle(c)
	})
	proxy.CutOnCommitReply(1)
	err := pgtx.Transaction(ctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "insert into ledger values ('t-1')")
		return err
	})
	if err != nil {
		t.Fatalf("err = %v: the lost COMMIT must be resolved (committed)", err)
	}
	if s := pool.Stats().Resolved; s.CommittedCount != 1 {
		t.Errorf("resolved = %+v, want one committed", s)
	}
	if n := queryInt(t, ctx, admin, "select count(*) from ledger"); n != 1 {
		t.Errorf("rows %d, want 1", n)
	}
	if calls.Load() < 2 {
		t.Errorf("BeforeConnect saw %d connects, want the pool's and the resolver's", calls.Load())
	}
}
