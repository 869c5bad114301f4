package sqldb

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/integration/internal/itest"
)

// TestCutAsCommitLeftAfterAQuery: a query of database/sql asks for its
// result formats, which a statement that reads the transaction's id in its
// write cannot carry (pgx's batches take none): such a query went alone,
// without the read. Each module's transaction still knows its id before
// COMMIT is sent, so that when the connection is cut as soon as COMMIT left
// (and its backend has ended, so nothing else could tell) it resolves the
// COMMIT, committed, and fn ran once:
//   - "first query of a new text": on a *sql.DB that has not yet run the
//     query's text, the first query is sent alone after BEGIN; the
//     transfer's statements after it read the id;
//   - "a write by a query": the transaction's only write is an INSERT …
//     RETURNING run as a query, its texts known (the transaction ran once
//     before): it reads the id after it.
func TestCutAsCommitLeftAfterAQuery(t *testing.T) {
	first := func(pid *atomic.Int64, runs *int) txFunc {
		return func(ctx context.Context, s stmts) error {
			if _, err := s.scalar("select balance from accounts where id = ?", 1); err != nil {
				return err
			}
			n, err := s.scalar("select pg_backend_pid()")
			if err != nil {
				return err
			}
			pid.Store(n)
			return transfer("t-1", 10, runs)(ctx, s)
		}
	}
	returning := func(pid *atomic.Int64, runs *int) txFunc {
		return func(ctx context.Context, s stmts) error {
			*runs++
			n, err := s.scalar("select pg_backend_pid()")
			if err != nil {
				return err
			}
			pid.Store(n)
			_, err = s.scalar("insert into ledger (transfer, amount) values (?, ?) returning seq", "t-1", 10)
			return err
		}
	}
	tests := []struct {
		name    string
		fn      func(pid *atomic.Int64, runs *int) txFunc
		warm    bool // run fn once before the fault, texts learned
		wantBal int64
	}{
		{"first query of a new text", first, false, 990},
		{"a write by a query", returning, true, 1000},
	}
	for _, tt := range tests {
		for _, w := range ways {
			if !w.pgtx {
				continue
			}
			t.Run(tt.name+"/"+w.String(), func(t *testing.T) {
				direct, proxy, through := proxied(t)
				admin := itest.DirectConn(t, direct)
				watcher := itest.DirectConn(t, direct) // used from the proxy's goroutine
				r := w.open(t, through, openOpts{})
				var pid atomic.Int64
				runs := 0
				if tt.warm {
					if err := r.tx(itest.Ctx(t), tt.fn(&pid, &runs)); err != nil {
						t.Fatal(err)
					}
					mustExec(t, admin, "delete from ledger")
					runs = 0
				}
				// Were the id not known, the resolver would ask the cut
				// backend which transaction it runs: held until that
				// backend has ended, when nothing can tell.
				proxy.SlowStatements(func(sql string) bool {
					if strings.Contains(sql, "backend_xid") {
						itest.WaitBackendGone(t, itest.Ctx(t), watcher, pid.Load())
					}
					return false
				}, time.Millisecond)
				proxy.CutOnCommit(1)
				err := r.tx(itest.Ctx(t), tt.fn(&pid, &runs))
				rows, bal := ledger(t, admin, "t-1")
				if err != nil || runs != 1 || rows != 1 || bal != tt.wantBal {
					t.Errorf("err %v, fn ran %d times, ledger rows %d, balance %d: want nil, 1, 1, %d", err, runs, rows, bal, tt.wantBal)
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
}
