package integration

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// TestResolveWithoutTheMessage: an administrator revoked
// pg_logical_emit_message from PUBLIC, so the role may not write the message
// that marks its transactions' WAL. pgtx sees it when a connection is made:
// its transactions run as before (the id read writes nothing), and a COMMIT
// whose answer is lost is still resolved on the server that ran it; only
// the proof after a promotion is unavailable.
func TestResolveWithoutTheMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("changes a privilege on a server of its own")
	}
	ctx := testCtx(t)
	srv := server.New(t, nil)
	dsn := pgtxtest.NewDatabase(t, pgtxtest.WithServer(srv))
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table ledger (id text primary key)")
	mustExec(t, ctx, admin, "revoke execute on function pg_logical_emit_message(boolean, text, text) from public")
	role, roleDSN := testRole(t, ctx, admin, dsn, "resolver", "")
	mustExec(t, ctx, admin, "grant all on ledger to "+role)
	if _, err := directConn(t, roleDSN).Exec(ctx, "select pg_logical_emit_message(true, 'x', '')"); sqlState(err) != "42501" {
		t.Fatalf("the role called pg_logical_emit_message: %v; the test did not revoke it", err)
	}
	proxy, through := proxyTo(t, srv.Addr(), roleDSN)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			pool := newPool(t, through, func(c *pgtx.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			proxy.CutOnCommitReply(1)
			var runs counter
			id := "t-" + mode.String()
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				runs.inc()
				_, err := tx.Exec(ctx, "insert into ledger values ($1)", id)
				return err
			})
			n := queryInt(t, ctx, admin, "select count(*) from ledger where id = $1", id)
			if err != nil || runs.get() != 1 || n != 1 || pool.Stats().Resolved.CommittedCount != 1 {
				t.Errorf("err = %v, fn ran %d times, the row %d times, resolutions %+v; want success once, resolved committed",
					err, runs.get(), n, pool.Stats().Resolved)
			}
		})
	}
}
