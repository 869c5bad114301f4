package behindpgpool

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/deferred"
	"github.com/pgtx-go/pgtx/integration/internal/itest"
)

// TestPgpoolDeferred: behind Pgpool-II with load balancing, deferred
// statements (which go in their own write before COMMIT there, after
// BEGIN alone) and whole batches commit in every exec mode, on sessions
// balanced to the standby: every call commits and no money is made or
// lost.
func TestPgpoolDeferred(t *testing.T) {
	e := behindPgpool(t, nil, hotAccounts...)
	ctx := itest.CtxFor(t, 3*time.Minute)
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
	const perMode = 10
	for _, mode := range modes {
		pool := e.balancedTo(t, e.standby.Addr(), func(c *pgtx.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
		for i := range perMode {
			from, to := 1+i%4, 1+(i+1)%4
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := pgtx.Transaction(cctx, pool, pgtx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
				var b int64
				if err := tx.QueryRow(ctx, "select balance from acct where id = $1", from).Scan(&b); err != nil {
					return err
				}
				if err := deferred.Exec(ctx, "update acct set balance = balance - 1, version = version + 1 where id = $1", from); err != nil {
					return err
				}
				return deferred.Exec(ctx, "update acct set balance = balance + 1, version = version + 1 where id = $1", to)
			})
			if err == nil {
				b := &pgx.Batch{}
				b.Queue("update acct set balance = balance - 1 where id = $1", to)
				b.Queue("update acct set balance = balance + 1 where id = $1", from)
				err = deferred.Transaction(cctx, pool, pgtx.ReadCommitted, pgtx.Options{}, b)
			}
			cancel()
			if err != nil {
				t.Fatalf("%v, call %d: %v", mode, i, err)
			}
		}
		pool.Close()
	}
	// Read on the primary: through Pgpool-II the read may be balanced to
	// the standby, which may not have replayed the last commits yet.
	admin := itest.DirectConn(t, e.direct)
	var total, updates int64
	if err := admin.QueryRow(ctx, "select sum(balance), sum(version) from acct").Scan(&total, &updates); err != nil {
		t.Fatal(err)
	}
	if want := int64(len(modes) * perMode * 2); total != 4000 || updates != want {
		t.Errorf("total %d after %d versioned updates; want 4000 after %d", total, updates, want)
	}
}
