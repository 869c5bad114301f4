package behindpgpool

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/integration/internal/itest"
)

// hotAccounts are the accounts of the Pgpool-II transfer tests: few, so
// that transfers collide; each row's version counts its updates, so that a
// transaction that read a version its own update does not follow read a
// stale row.
var hotAccounts = []string{
	"create table acct (id int primary key, balance bigint not null, version bigint not null default 0)",
	"insert into acct select g, 1000 from generate_series(1, 4) g",
}

// transferChecked moves 1 from one hot account to another and reports, in
// stale, a read its own update proves stale: the version it read is not
// the one its update found.
func transferChecked(ctx context.Context, tx pgx.Tx, from, to int, stale *atomic.Int64) error {
	var balance, version int64
	if err := tx.QueryRow(ctx, "select balance, version from acct where id = $1", from).Scan(&balance, &version); err != nil {
		return err
	}
	var after int64
	if err := tx.QueryRow(ctx, "update acct set balance = balance - 1, version = version + 1 where id = $1 returning version", from).Scan(&after); err != nil {
		return err
	}
	if after != version+1 {
		stale.Add(1)
	}
	_, err := tx.Exec(ctx, "update acct set balance = balance + 1, version = version + 1 where id = $1", to)
	return err
}

// TestPgpoolTransactionsStayOnTheirNode: behind Pgpool-II with load
// balancing, the standby's replay paused (so that a read it answers is
// certainly stale), 8 workers run 2,000 SERIALIZABLE transfers between 4
// hot accounts, and 400 REPEATABLE READ ones, in pgx's default exec mode
// and with deadlines longer than StatementTimeout: no statement of them is
// answered by the standby (0 stale reads: each read's version is the one
// its update finds), every call commits, and no money is made or lost.
func TestPgpoolTransactionsStayOnTheirNode(t *testing.T) {
	e := behindPgpool(t, nil, hotAccounts...)
	e.pauseReplay(t)
	for _, tt := range []struct {
		iso pgtx.Isolation
		n   int
	}{{pgtx.Serializable, 2000}, {pgtx.RepeatableRead, 400}} {
		t.Run(tt.iso.String(), func(t *testing.T) {
			ctx := itest.CtxFor(t, 5*time.Minute)
			// Six connections and the cancel pool's two fill Pgpool-II's
			// eight children (num_init_children), as docs/poolers.md asks.
			// Eight workers share the six: the acquire may wait as long as
			// a call's deadline, since what is tested is which node answers
			// (CI's load once held a connection past the 2s default).
			pool := itest.NewPool(t, e.through, func(c *pgtx.Config) {
				c.MaxConns = 6
				c.AcquireTimeout = 10 * time.Second
			})
			var stale, failed atomic.Int64
			var firstErr error
			var once sync.Once
			var wg sync.WaitGroup
			const workers = 8
			for w := range workers {
				wg.Go(func() {
					for i := range tt.n / workers {
						from, to := 1+(w+i)%4, 1+(w+i+1)%4
						cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
						err := pgtx.Transaction(cctx, pool, tt.iso, func(ctx context.Context, tx pgx.Tx) error {
							return transferChecked(ctx, tx, from, to, &stale)
						})
						cancel()
						if err != nil {
							failed.Add(1)
							once.Do(func() { firstErr = err })
						}
					}
				})
			}
			wg.Wait()
			if n := stale.Load(); n != 0 {
				t.Errorf("%d attempts read a stale row: a standby answered a %v transaction", n, tt.iso)
			}
			if n := failed.Load(); n != 0 {
				t.Errorf("%d of %d calls failed, the first with: %v", n, tt.n, firstErr)
			}
			admin := itest.DirectConn(t, e.direct)
			if sum := itest.QueryInt(t, ctx, admin, "select sum(balance)::int from acct"); sum != 4000 {
				t.Errorf("the accounts hold %d, want 4000", sum)
			}
		})
	}
}

// TestPgpoolFirstWriteNeverHangs: on sessions Pgpool-II balances to the
// standby, 200 calls (40 in each exec mode, on two sessions, read-only and
// read-write in turn) with deadlines shorter than StatementTimeout, so that each carries
// its deadline to the server with BEGIN, all commit; then Pgpool-II still
// answers, and none of its children is left stuck in a command.
func TestPgpoolFirstWriteNeverHangs(t *testing.T) {
	e := behindPgpool(t, nil, hotAccounts...)
	ctx := itest.CtxFor(t, 5*time.Minute)
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
	const perMode, perSession = 40, 20
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			for s := range perMode / perSession {
				pool := e.balancedTo(t, e.standby.Addr(), func(c *pgtx.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
				for i := range perSession {
					cctx, cancel := context.WithTimeout(ctx, time.Second)
					readOnly := i%2 == 0
					err := pgtx.TransactionWithOptions(cctx, pool, pgtx.ReadCommitted, pgtx.Options{ReadOnly: readOnly},
						func(ctx context.Context, tx pgx.Tx) error {
							if readOnly {
								var b int64
								return tx.QueryRow(ctx, "select balance from acct where id = $1", 1+i%4).Scan(&b)
							}
							_, err := tx.Exec(ctx, "update acct set version = version + 1 where id = $1", 1+i%4)
							return err
						})
					cancel()
					if err != nil {
						t.Fatalf("session %d, call %d (read-only %v): %v", s, i, readOnly, err)
					}
				}
				pool.Close()
			}
		})
	}
	// Every client is gone: no child may still be in a command.
	var stuck []int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		procs, err := e.pool.Processes(ctx)
		if err != nil {
			t.Fatalf("Pgpool-II no longer answers SHOW POOL_PROCESSES: %v", err)
		}
		stuck = stuck[:0]
		for _, p := range procs {
			if p.Status == "Execute command" {
				stuck = append(stuck, p.PID)
			}
		}
		// The one executing SHOW POOL_PROCESSES is this test's.
		if len(stuck) <= 1 || time.Now().After(deadline) {
			break
		}
	}
	if len(stuck) > 1 {
		t.Errorf("children %v are stuck in a command with no client", stuck)
	}
	pool := itest.NewPool(t, e.through, nil)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var one int
	if err := pool.QueryRow(cctx, "select 1").Scan(&one); err != nil {
		t.Errorf("Pgpool-II no longer answers: %v", err)
	}
}

// TestPgpoolReadOnlyBalanced: a read-only REPEATABLE READ transaction of
// three reads, with a deadline it carries to the server, on a session
// Pgpool-II balances to the standby is answered whole by the standby (its
// replay paused: every read sees the standby's snapshot, none the
// primary's), and on one balanced to the primary whole by the primary:
// pgtx's own statements pin it nowhere. Afterwards the session's
// statement_timeout is the pool's again.
func TestPgpoolReadOnlyBalanced(t *testing.T) {
	e := behindPgpool(t, nil, hotAccounts...)
	e.pauseReplay(t)
	ctx := itest.Ctx(t)
	admin := itest.DirectConn(t, e.direct)
	itest.Exec(t, ctx, admin, "update acct set balance = balance + 1000, version = version + 1 where id = 1")
	for _, tt := range []struct {
		name string
		addr string
		want int64 // the balance of account 1 that node holds
	}{{"standby", e.standby.Addr(), 1000}, {"primary", e.primary.Addr(), 2000}} {
		t.Run(tt.name, func(t *testing.T) {
			pool := e.balancedTo(t, tt.addr, nil)
			for range 5 {
				var ports []int
				var balances []int64
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err := pgtx.TransactionWithOptions(cctx, pool, pgtx.RepeatableRead, pgtx.Options{ReadOnly: true},
					func(ctx context.Context, tx pgx.Tx) error {
						ports, balances = nil, nil
						for range 3 {
							var p int
							var b int64
							if err := tx.QueryRow(ctx, "select inet_server_port(), balance from acct where id = $1", 1).Scan(&p, &b); err != nil {
								return err
							}
							ports, balances = append(ports, p), append(balances, b)
						}
						return nil
					})
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				want := port(t, tt.addr)
				for i := range ports {
					if ports[i] != want || balances[i] != tt.want {
						t.Fatalf("read %d answered by port %d with balance %d; want every read by %s's port %d with %d (reads %v, %v)",
							i, ports[i], balances[i], tt.name, want, tt.want, ports, balances)
					}
				}
			}
			var timeout string
			if err := pool.QueryRow(ctx, "show statement_timeout", pgx.QueryExecModeSimpleProtocol).Scan(&timeout); err != nil {
				t.Fatal(err)
			}
			if timeout != "5s" {
				t.Errorf("the session's statement_timeout is %s after the transactions, want the pool's 5s", timeout)
			}
		})
	}
}
