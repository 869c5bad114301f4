package sqldb

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// TestCutAsCommitLeftAfterAFirstQuery: on a *sql.DB that has not yet run
// a query's text, the transaction's first query asks for database/sql's
// result formats, which cannot go with BEGIN: it is sent alone after it,
// without the read of the transaction's id. The transfer's statements after
// it read the id, so it is known before COMMIT is sent: when the connection
// is cut as soon as COMMIT left (and its backend has ended, so nothing else
// could tell), each module resolves the COMMIT, committed, and fn ran once.
func TestCutAsCommitLeftAfterAFirstQuery(t *testing.T) {
	for _, w := range ways {
		if !w.pgtx {
			continue
		}
		t.Run(w.String(), func(t *testing.T) {
			direct, proxy, through := proxied(t)
			admin := directConn(t, direct)
			watcher := directConn(t, direct) // used from the proxy's goroutine
			r := w.open(t, through, openOpts{})
			var pid atomic.Int64
			// Were the id not known, the resolver would ask the cut
			// backend which transaction it runs: held until that backend
			// has ended, when nothing can tell.
			proxy.SlowStatements(func(sql string) bool {
				if strings.Contains(sql, "backend_xid") {
					waitBackendGone(t, watcher, pid.Load())
				}
				return false
			}, time.Millisecond)
			proxy.CutOnCommit(1)
			runs := 0
			err := r.tx(testCtx(t), func(ctx context.Context, s stmts) error {
				if _, err := s.scalar("select balance from accounts where id = ?", 1); err != nil {
					return err
				}
				n, err := s.scalar("select pg_backend_pid()")
				if err != nil {
					return err
				}
				pid.Store(n)
				return transfer("t-1", 10, &runs)(ctx, s)
			})
			rows, bal := ledger(t, admin, "t-1")
			if err != nil || runs != 1 || rows != 1 || bal != 990 {
				t.Errorf("err %v, fn ran %d times, ledger rows %d, balance %d: want nil, 1, 1, 990", err, runs, rows, bal)
			}
			if errors.Is(err, pgtx.ErrCommitUnknown) {
				t.Errorf("the id was read before COMMIT was sent: the outcome is knowable")
			}
			if c := r.pool.Stats().Resolved.CommittedCount; c != 1 {
				t.Errorf("resolved committed %d, want 1", c)
			}
		})
	}
}

// waitBackendGone returns once the backend pid has exited, asking on conn.
func waitBackendGone(t *testing.T, conn *pgx.Conn, pid int64) {
	ctx := testCtx(t)
	for ctx.Err() == nil {
		var n int
		if err := conn.QueryRow(ctx, "select count(*) from pg_stat_activity where pid = $1", pid).Scan(&n); err != nil {
			t.Errorf("is backend %d gone: %v", pid, err)
			return
		}
		if n == 0 {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Errorf("backend %d did not end: %v", pid, ctx.Err())
}
