package integration

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/deferred"
)

// transferSchema is the bank of the deferred tests: a transfer reads the
// payer's balance for update, then moves the money and records it.
const transferSchema = `create table accounts (id int primary key, balance int not null check (balance >= 0));
	insert into accounts select g, 100 from generate_series(1, 4) g;
	create table ledger (id bigserial primary key, payer int not null, payee int not null, amount int not null)`

// deferredTransfer moves amount from payer to payee: the read goes at
// once, the two updates and the ledger row are deferred.
func deferredTransfer(payer, payee, amount int) func(ctx context.Context, tx pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		var balance int
		if err := tx.QueryRow(ctx, "select balance from accounts where id = $1 for update", payer).Scan(&balance); err != nil {
			return err
		}
		if err := deferred.Exec(ctx, "update accounts set balance = balance - $2 where id = $1", payer, amount); err != nil {
			return err
		}
		if err := deferred.Exec(ctx, "update accounts set balance = balance + $2 where id = $1", payee, amount); err != nil {
			return err
		}
		return deferred.Exec(ctx, "insert into ledger (payer, payee, amount) values ($1, $2, $3)", payer, payee, amount)
	}
}

// transferBatch is the same transfer, without the read, as one batch.
func transferBatch(payer, payee, amount int) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue("select balance from accounts where id = $1 for update", payer)
	b.Queue("update accounts set balance = balance - $2 where id = $1", payer, amount)
	b.Queue("update accounts set balance = balance + $2 where id = $1", payee, amount)
	b.Queue("insert into ledger (payer, payee, amount) values ($1, $2, $3)", payer, payee, amount)
	return b
}

// TestDeferredRoundTrips: deferred statements travel with COMMIT, so a
// transfer whose read goes first and whose three writes are deferred
// costs two round trips, and a batch of four statements one, in every
// exec mode, with resolution on and off (the id read and the WAL mark
// travel with them). The balances say every transfer applied once.
func TestDeferredRoundTrips(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, transferSchema)
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
	transfers := 0
	for _, mode := range modes {
		for _, resolve := range []bool{true, false} {
			pool, wc := countingPool(t, dsn, func(c *pgtx.Config) {
				c.ConnConfig.DefaultQueryExecMode = mode
				if !resolve {
					c.ResolveTimeout = -1
				}
			})
			cases := []struct {
				name string
				run  func() error
				want int64
			}{
				{"transfer, writes deferred", func() error {
					return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, deferredTransfer(1, 2, 1))
				}, 2},
				{"batch of four", func() error {
					return deferred.Transaction(ctx, pool, pgtx.ReadCommitted, pgtx.Options{}, transferBatch(1, 2, 1))
				}, 1},
				{"fn that only defers", func() error {
					return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
						if err := deferred.Exec(ctx, "update accounts set balance = balance - $2 where id = $1", 1, 1); err != nil {
							return err
						}
						if err := deferred.Exec(ctx, "update accounts set balance = balance + $2 where id = $1", 2, 1); err != nil {
							return err
						}
						return deferred.Exec(ctx, "insert into ledger (payer, payee, amount) values ($1, $2, $3)", 1, 2, 1)
					})
				}, 1},
			}
			for _, c := range cases {
				// Once to describe the texts on the connection, then counted.
				for i := range 2 {
					before := wc.n.Load()
					if err := c.run(); err != nil {
						t.Fatalf("%v, resolution %v, %s: %v", mode, resolve, c.name, err)
					}
					transfers++
					want := c.want
					if mode == pgx.QueryExecModeDescribeExec && c.name == "transfer, writes deferred" {
						want++ // pgx describes fn's query before each run in that mode
					}
					if got := wc.n.Load() - before; i == 1 && got != want {
						t.Errorf("exec mode %v, resolution %v, %s: %d round trips, want %d", mode, resolve, c.name, got, want)
					}
				}
			}
		}
	}
	if got, want := queryInt(t, ctx, admin, "select balance from accounts where id = 1"), 100-transfers; got != want {
		t.Errorf("payer's balance %d, want %d", got, want)
	}
	if got := queryInt(t, ctx, admin, "select count(*) from ledger"); got != transfers {
		t.Errorf("%d ledger rows, want %d", got, transfers)
	}
}

// TestDeferredErrorEndsTheAttempt: a deferred statement's error ends the
// attempt as fn's own would, whatever fn does with it: returned as it is,
// and nothing commits. It runs in order: a later statement sees it.
func TestDeferredErrorEndsTheAttempt(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, transferSchema)
	pool := newPool(t, dsn, nil)
	overdraw := func(ctx context.Context) error {
		return deferred.Exec(ctx, "update accounts set balance = balance - 1000 where id = $1", 1)
	}
	tests := []struct {
		name string
		fn   func(ctx context.Context, tx pgx.Tx) error
	}{
		{"at COMMIT", func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "insert into ledger (payer, payee, amount) values (1, 2, 1000)"); err != nil {
				return err
			}
			return overdraw(ctx)
		}},
		{"at COMMIT, nothing else sent", func(ctx context.Context, tx pgx.Tx) error {
			if err := deferred.Exec(ctx, "insert into ledger (payer, payee, amount) values (1, 2, 1000)"); err != nil {
				return err
			}
			return overdraw(ctx)
		}},
		{"with the next statement, swallowed", func(ctx context.Context, tx pgx.Tx) error {
			if err := overdraw(ctx); err != nil {
				return err
			}
			_, _ = tx.Exec(ctx, "insert into ledger (payer, payee, amount) values (1, 2, 1000)")
			return nil
		}},
		{"with the next query, wrapped", func(ctx context.Context, tx pgx.Tx) error {
			if err := overdraw(ctx); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRow(ctx, "select count(*) from ledger").Scan(&n); err != nil {
				return errors.Join(errors.New("count"), err)
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var runs counter
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				runs.inc()
				return tt.fn(ctx, tx)
			})
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
				t.Fatalf("err = %v, want the check violation (23514)", err)
			}
			if pgtx.Classify(err) != pgtx.ClassPermanent || runs.get() != 1 {
				t.Errorf("class %v after %d runs, want permanent after 1", pgtx.Classify(err), runs.get())
			}
			if n := queryInt(t, ctx, admin, "select count(*) from ledger"); n != 0 {
				t.Errorf("%d ledger rows committed, want none", n)
			}
			if b := queryInt(t, ctx, admin, "select balance from accounts where id = 1"); b != 100 {
				t.Errorf("balance %d, want 100", b)
			}
		})
	}
	t.Run("in order", func(t *testing.T) {
		var seen int
		err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			if err := deferred.Exec(ctx, "insert into ledger (payer, payee, amount) values (3, 4, 1)"); err != nil {
				return err
			}
			return tx.QueryRow(ctx, "select count(*) from ledger where payer = 3").Scan(&seen)
		})
		if err != nil || seen != 1 {
			t.Errorf("err = %v, the next query saw %d rows; want the deferred one", err, seen)
		}
	})
}

// TestDeferredConflictRerunsTheWhole: a deferred update that meets a
// concurrent update under REPEATABLE READ (40001, at COMMIT's write) runs
// the whole transaction again, and the second attempt commits.
func TestDeferredConflictRerunsTheWhole(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, transferSchema)
	pool := newPool(t, dsn, nil)
	var runs counter
	err := pgtx.Transaction(ctx, pool, pgtx.RepeatableRead, func(ctx context.Context, tx pgx.Tx) error {
		runs.inc()
		var b int
		if err := tx.QueryRow(ctx, "select balance from accounts where id = 3").Scan(&b); err != nil {
			return err
		}
		if pgtx.Attempt(ctx) == 1 {
			// Another transaction changes the row after this one's
			// snapshot.
			mustExec(t, ctx, admin, "update accounts set balance = balance + 5 where id = 3")
		}
		return deferred.Exec(ctx, "update accounts set balance = $2 where id = $1", 3, b+1)
	})
	if err != nil || runs.get() != 2 {
		t.Fatalf("err = %v after %d runs, want success after 2", err, runs.get())
	}
	if b := queryInt(t, ctx, admin, "select balance from accounts where id = 3"); b != 106 {
		t.Errorf("balance %d, want 106: the second attempt read the other's update", b)
	}
}

// TestDeferredLostCommitIsResolved: when the answer to the write that
// carries the deferred statements and COMMIT is lost, the call resolves
// it like any COMMIT: the id read travelled before COMMIT in that write.
func TestDeferredLostCommitIsResolved(t *testing.T) {
	for _, only := range []bool{true, false} {
		name := "read first"
		if only {
			name = "only deferred"
		}
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			direct, proxy, through := proxied(t)
			admin := directConn(t, direct)
			mustExec(t, ctx, admin, transferSchema)
			pool := newPool(t, through, nil)
			proxy.CutOnCommitReply(1)
			var runs counter
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				runs.inc()
				if !only {
					var n int
					if err := tx.QueryRow(ctx, "select count(*) from ledger").Scan(&n); err != nil {
						return err
					}
				}
				return deferred.Exec(ctx, "insert into ledger (payer, payee, amount) values (1, 2, 3)")
			})
			r := pool.Stats().Resolved
			if err != nil || r.CommittedCount != 1 {
				t.Errorf("err = %v, resolutions %+v; want success, one resolved committed", err, r)
			}
			if n := queryInt(t, ctx, admin, "select count(*) from ledger"); runs.get() != 1 || n != 1 {
				t.Errorf("fn ran %d times, %d rows; want once, 1 row", runs.get(), n)
			}
		})
	}
}

// TestTransactionBatchResults: the functions queued with a batch's
// statements read their results once, after COMMIT, those of the attempt
// that committed; bad input sends nothing.
func TestTransactionBatchResults(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, transferSchema)
	pool := newPool(t, dsn, nil)
	b := transferBatch(1, 2, 10)
	var before int
	var calls counter
	b.QueuedQueries[0].QueryRow(func(row pgx.Row) error {
		calls.inc()
		return row.Scan(&before)
	})
	var tag pgconn.CommandTag
	b.QueuedQueries[1].Exec(func(ct pgconn.CommandTag) error {
		tag = ct
		return nil
	})
	var id int64
	b.Queue("select max(id) from ledger").QueryRow(func(row pgx.Row) error { return row.Scan(&id) })
	if err := deferred.Transaction(ctx, pool, pgtx.Serializable, pgtx.Options{}, b); err != nil {
		t.Fatal(err)
	}
	if before != 100 || calls.get() != 1 || tag.RowsAffected() != 1 || id != 1 {
		t.Errorf("read balance %d in %d calls, update tag %q, ledger id %d; want 100 once, UPDATE 1, 1", before, calls.get(), tag, id)
	}
	failing := &pgx.Batch{}
	failing.Queue("insert into ledger (payer, payee, amount) values (1, 2, 3) returning id").QueryRow(func(pgx.Row) error {
		return errors.New("the function's own error")
	})
	err := deferred.Transaction(ctx, pool, pgtx.ReadCommitted, pgtx.Options{}, failing)
	if err == nil || queryInt(t, ctx, admin, "select count(*) from ledger") != 2 {
		t.Errorf("err = %v; want the function's error, with the batch committed", err)
	}
	bad := []struct {
		name string
		b    *pgx.Batch
	}{
		{"nil batch", nil},
		{"per-query option", func() *pgx.Batch {
			b := &pgx.Batch{}
			b.Queue("select 1", pgx.QueryExecModeExec)
			return b
		}()},
	}
	for _, tt := range bad {
		if err := deferred.Transaction(ctx, pool, pgtx.ReadCommitted, pgtx.Options{}, tt.b); !errors.Is(err, pgtx.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", tt.name, err)
		}
	}
	if err := deferred.Transaction(ctx, pool, pgtx.ReadCommitted, pgtx.Options{}, &pgx.Batch{}); err != nil {
		t.Errorf("empty batch: %v", err)
	}
}

// TestDeferMisuse: Defer outside fn, after fn returned, or with a
// per-query option is an error matching ErrInvalidArgument.
func TestDeferMisuse(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, newDB(t), nil)
	if err := deferred.Exec(ctx, "select 1"); !errors.Is(err, pgtx.ErrInvalidArgument) {
		t.Errorf("outside fn: %v", err)
	}
	var kept context.Context
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		kept = ctx
		if err := deferred.Exec(ctx, "select 1", pgx.QueryExecModeExec); !errors.Is(err, pgtx.ErrInvalidArgument) {
			t.Errorf("per-query option: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := deferred.Exec(kept, "select 1"); !errors.Is(err, pgtx.ErrInvalidArgument) {
		t.Errorf("after fn returned: %v", err)
	}
}

// TestDeferredBeforeWhatCannotCarryIt: a deferred statement is sent
// before a savepoint, a copy and the connection handed out, so that they
// see it; pgx.NamedArgs are rewritten when deferred.
func TestDeferredBeforeWhatCannotCarryIt(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, transferSchema)
	pool := newPool(t, dsn, nil)
	insert := func(ctx context.Context, payer int) error {
		return deferred.Exec(ctx, "insert into ledger (payer, payee, amount) values (@payer, 2, 1)", pgx.NamedArgs{"payer": payer})
	}
	tests := []struct {
		name  string
		count func(ctx context.Context, tx pgx.Tx, payer int) (int, error)
	}{
		{"savepoint", func(ctx context.Context, tx pgx.Tx, payer int) (int, error) {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return 0, err
			}
			var n int
			err = sp.QueryRow(ctx, "select count(*) from ledger where payer = $1", payer).Scan(&n)
			if err == nil {
				err = sp.Commit(ctx)
			}
			return n, err
		}},
		{"copy", func(ctx context.Context, tx pgx.Tx, payer int) (int, error) {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"ledger"}, []string{"payer", "payee", "amount"},
				pgx.CopyFromRows([][]any{{payer + 100, 2, 1}})); err != nil {
				return 0, err
			}
			var n int
			err := tx.QueryRow(ctx, "select count(*) from ledger where payer = $1", payer).Scan(&n)
			return n, err
		}},
		{"connection handed out", func(ctx context.Context, tx pgx.Tx, payer int) (int, error) {
			var n int
			err := tx.Conn().QueryRow(ctx, "select count(*) from ledger where payer = $1", payer).Scan(&n)
			return n, err
		}},
	}
	for i, tt := range tests {
		payer := 10 + i
		var n int
		err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			if err := insert(ctx, payer); err != nil {
				return err
			}
			var err error
			n, err = tt.count(ctx, tx, payer)
			return err
		})
		if err != nil || n != 1 {
			t.Errorf("%s: err = %v, saw %d deferred rows; want 1", tt.name, err, n)
		}
		if got := queryInt(t, ctx, admin, "select count(*) from ledger where payer = $1", payer); got != 1 {
			t.Errorf("%s: %d rows committed, want 1", tt.name, got)
		}
	}
}

// TestDeferredAfterDeallocateAll: a DEALLOCATE ALL of fn's drops the
// statements the connection prepared for its deferred statements: the call
// that meets it fails with 26000 and commits nothing, and the connection
// prepares them again for the next call.
func TestDeferredAfterDeallocateAll(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, transferSchema)
	pool := newPool(t, dsn, func(c *pgtx.Config) { c.MaxConns = 1 })
	insert := func(deallocate bool) error {
		return pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			if deallocate {
				if _, err := tx.Exec(ctx, "deallocate all"); err != nil {
					return err
				}
			}
			return deferred.Exec(ctx, "insert into ledger (payer, payee, amount) values ($1, 2, 3)", 7)
		})
	}
	if err := insert(false); err != nil {
		t.Fatal(err)
	}
	err := insert(true)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "26000" {
		t.Errorf("after DEALLOCATE ALL: err = %v, want 26000", err)
	}
	if err := insert(false); err != nil {
		t.Errorf("the next call: %v", err)
	}
	if n := queryInt(t, ctx, admin, "select count(*) from ledger where payer = 7"); n != 2 {
		t.Errorf("%d rows, want 2", n)
	}
}

// TestQueryTracerSeesDeferred: a pgx QueryTracer sees the deferred
// statements, those sent with fn's next statement and those sent with
// COMMIT.
func TestQueryTracerSeesDeferred(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	qt := &queryTracer{mu: make(chan struct{}, 1)}
	pool := newPool(t, dsn, func(c *pgtx.Config) { c.ConnConfig.Tracer = qt })
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if err := deferred.Exec(ctx, "select $1::int", 1); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "select 2"); err != nil {
			return err
		}
		return deferred.Exec(ctx, "select $1::int + 2", 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	qt.mu <- struct{}{}
	sqls := append([]string(nil), qt.sqls...)
	<-qt.mu
	for _, want := range []string{"select $1::int", "select 2", "select $1::int + 2"} {
		if !slices.Contains(sqls, want) {
			t.Errorf("the tracer saw %q; want %q among them", sqls, want)
		}
	}
}
