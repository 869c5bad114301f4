package integration

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/integration/internal/itest"
)

// TestResolveAfterAStatementWithoutTheIDRead: a transaction whose first
// statement cannot carry the id read (it is sent after BEGIN, alone: a
// query with pgx's per-query options, a COPY, a savepoint) writes with a
// statement pgtx sees. That statement reads the id in its own write, so the
// id is known before COMMIT is sent; when the connection is cut as soon as
// COMMIT left (the backend ends, so nothing else could tell), the COMMIT is
// resolved, committed, and fn ran once.
func TestResolveAfterAStatementWithoutTheIDRead(t *testing.T) {
	tests := []struct {
		name  string
		first func(ctx context.Context, tx pgx.Tx) error
	}{
		{"a query with result formats", func(ctx context.Context, tx pgx.Tx) error {
			var n int
			return tx.QueryRow(ctx, "select count(*) from ledger", pgx.QueryResultFormats{pgx.TextFormatCode}).Scan(&n)
		}},
		{"an exec mode", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "select count(*) from ledger", pgx.QueryExecModeSimpleProtocol)
			return err
		}},
		{"a copy", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"audit"}, []string{"note"}, pgx.CopyFromRows([][]any{{"copied"}}))
			return err
		}},
		{"a savepoint", func(ctx context.Context, tx pgx.Tx) error {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := sp.Exec(ctx, "select 1"); err != nil {
				return err
			}
			return sp.Commit(ctx)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			direct, proxy, through := proxied(t)
			admin := directConn(t, direct)
			watcher := directConn(t, direct) // used from the proxy's goroutine
			mustExec(t, ctx, admin, "create table ledger (id text primary key)")
			mustExec(t, ctx, admin, "create table audit (note text)")
			pool := newPool(t, through, nil)
			var pid atomic.Uint32
			// Were the id not known, the resolver would ask the cut
			// backend which transaction it runs: held until that backend
			// has ended, when nothing can tell.
			watchAsk(t, proxy, "backend_xid", func() { itest.WaitBackendGone(t, ctx, watcher, int64(pid.Load())) })
			proxy.CutOnCommit(1)
			var runs counter
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				runs.inc()
				if err := tt.first(ctx, tx); err != nil {
					return err
				}
				// (tx.Conn would hand the connection out: what runs on it
				// pgtx does not see, which is another case.)
				var backend uint32
				if err := tx.QueryRow(ctx, "select pg_backend_pid()").Scan(&backend); err != nil {
					return err
				}
				pid.Store(backend)
				_, err := tx.Exec(ctx, "insert into ledger values ($1)", "t-1")
				return err
			})
			r := pool.Stats().Resolved
			if err != nil || r.CommittedCount != 1 {
				t.Errorf("err = %v, resolutions %+v; want success, one committed", err, r)
			}
			if errors.Is(err, pgtx.ErrCommitUnknown) {
				t.Errorf("the id was read before COMMIT was sent: the outcome is knowable")
			}
			if n, rows := runs.get(), queryInt(t, ctx, admin, "select count(*) from ledger"); n != 1 || rows != 1 {
				t.Errorf("fn ran %d times, %d rows; want once, 1 row", n, rows)
			}
		})
	}
}
