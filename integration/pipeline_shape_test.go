package integration

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
)

// writeCounter counts the writes of the connections it dials: pgx flushes
// once per round trip.
type writeCounter struct{ n atomic.Int64 }

type countingConn struct {
	net.Conn
	c *writeCounter
}

func (c countingConn) Write(b []byte) (int, error) {
	c.c.n.Add(1)
	return c.Conn.Write(b)
}

// countingPool is a pgtx pool of one connection whose writes are counted.
func countingPool(t *testing.T, dsn string, mutate func(*pgtx.Config)) (*pgtx.Pool, *writeCounter) {
	t.Helper()
	wc := &writeCounter{}
	pool := newPool(t, dsn, func(c *pgtx.Config) {
		c.MaxConns, c.MinConns = 1, 1
		// The cancel pool, over which a resolving pool also asks its
		// server once how it replicates, has its own connection string:
		// only the transactions' connection is counted.
		c.CancelConnString = dsn
		var d net.Dialer
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countingConn{Conn: conn, c: wc}, nil
		}
		if mutate != nil {
			mutate(c)
		}
	})
	return pool, wc
}

// TestRoundTrips: BEGIN travels with fn's first statement and COMMIT goes
// alone when the id is known (or provably none): two round trips for a
// one-statement transaction in every exec mode, whether it writes or not,
// with resolution on; none for a fn that sends nothing. A transaction whose
// first statement only reads and which then writes reads its id in
// COMMIT's write: still one round trip per statement, plus COMMIT.
func TestRoundTrips(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table counters (id int primary key, n int not null); insert into counters values (1, 0)")
	fns := []struct {
		name string
		fn   func(ctx context.Context, tx pgx.Tx) error
		want int64
	}{
		{"nothing", func(context.Context, pgx.Tx) error { return nil }, 0},
		{"select 1", func(ctx context.Context, tx pgx.Tx) error { _, err := tx.Exec(ctx, "select 1"); return err }, 2},
		{"queryrow with an argument", func(ctx context.Context, tx pgx.Tx) error {
			var n int
			return tx.QueryRow(ctx, "select n from counters where id = $1", 1).Scan(&n)
		}, 2},
		{"one-row update", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "update counters set n = n + 1 where id = $1", 1)
			return err
		}, 2},
		{"read, then write", func(ctx context.Context, tx pgx.Tx) error {
			var n int
			if err := tx.QueryRow(ctx, "select n from counters where id = $1", 1).Scan(&n); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "update counters set n = $2 where id = $1", 1, n+1)
			return err
		}, 3},
	}
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
	for _, mode := range modes {
		for _, resolve := range []bool{true, false} {
			pool, wc := countingPool(t, dsn, func(c *pgtx.Config) {
				c.ConnConfig.DefaultQueryExecMode = mode
				if !resolve {
					c.ResolveTimeout = -1
				}
			})
			for _, f := range fns {
				// Once to warm the caches, then counted.
				for i := range 2 {
					before := wc.n.Load()
					if err := pgtx.Transaction(ctx, pool, pgtx.RepeatableRead, f.fn); err != nil {
						t.Fatalf("%v, %s: %v", mode, f.name, err)
					}
					if got := wc.n.Load() - before; i == 1 && got != f.want {
						t.Errorf("exec mode %v, resolution %v, %s: %d round trips, want %d", mode, resolve, f.name, got, f.want)
					}
				}
			}
		}
	}
}

// TestSnapshotAtFirstStatement: a REPEATABLE READ transaction's snapshot
// is taken by fn's first statement, not before: a row committed by another
// transaction after fn began but before its first statement is seen.
func TestSnapshotAtFirstStatement(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table items (id int primary key)")
	pool := newPool(t, dsn, nil)
	for _, iso := range []pgtx.Isolation{pgtx.RepeatableRead, pgtx.Serializable} {
		mustExec(t, ctx, admin, "truncate items")
		var seen int
		err := pgtx.Transaction(ctx, pool, iso, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := admin.Exec(ctx, "insert into items values (1)"); err != nil {
				return err
			}
			return tx.QueryRow(ctx, "select count(*) from items").Scan(&seen)
		})
		if err != nil {
			t.Fatal(err)
		}
		if seen != 1 {
			t.Errorf("%v: fn's first statement saw %d rows, want the row committed before it (1)", iso, seen)
		}
	}
}

// TestTxMethodsInsideTheTransaction: what cannot travel with BEGIN
// (savepoints, COPY, Prepare, large objects, the connection itself) runs
// after it, inside the transaction: all of it is rolled back with it when
// fn fails.
func TestTxMethodsInsideTheTransaction(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table items (id int primary key)")
	pool := newPool(t, dsn, func(c *pgtx.Config) { c.Retry.MaxRetries = -1 })
	errFail := errors.New("fail")
	uses := []struct {
		name string
		use  func(ctx context.Context, tx pgx.Tx) error
	}{
		{"Conn", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Conn().Exec(ctx, "insert into items values (1)")
			return err
		}},
		{"Begin (a savepoint)", func(ctx context.Context, tx pgx.Tx) error {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := sp.Exec(ctx, "insert into items values (1)"); err != nil {
				return err
			}
			return sp.Commit(ctx)
		}},
		{"CopyFrom", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"items"}, []string{"id"}, pgx.CopyFromRows([][]any{{1}}))
			return err
		}},
		{"Prepare", func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Prepare(ctx, "ins", "insert into items values ($1)"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "ins", 1)
			return err
		}},
		{"LargeObjects", func(ctx context.Context, tx pgx.Tx) error {
			lo := tx.LargeObjects()
			oid, err := lo.Create(ctx, 0)
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, "insert into items values ($1)", int(oid%1000000))
			return err
		}},
	}
	for _, u := range uses {
		t.Run(u.name, func(t *testing.T) {
			mustExec(t, ctx, admin, "truncate items")
			var inTx bool
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				if err := u.use(ctx, tx); err != nil {
					return err
				}
				inTx = tx.Conn().PgConn().TxStatus() == 'T'
				return errFail
			})
			if !errors.Is(err, errFail) {
				t.Fatalf("err = %v, want fn's", err)
			}
			if !inTx {
				t.Errorf("%s ran outside a transaction", u.name)
			}
			if n := queryInt(t, ctx, admin, "select count(*) from items"); n != 0 {
				t.Errorf("%d rows after the rollback, want 0: %s ran outside the transaction", n, u.name)
			}
		})
	}
}

// TestBeginFailureIsTheAttempts: the write that carries BEGIN is cut; fn
// swallows its statement's error and returns nil. The attempt failed (its
// connection is lost, nothing committed), so the call runs fn again on a
// fresh connection instead of reporting a commit.
func TestBeginFailureIsTheAttempts(t *testing.T) {
	ctx := testCtx(t)
	direct, proxy, through := proxied(t)
	admin := directConn(t, direct)
	mustExec(t, ctx, admin, "create table items (id int primary key)")
	pool := newPool(t, through, nil)
	proxy.CutBeforeForward(faultproxy.MatchPrefix("begin"), 1)
	var runs counter
	err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		runs.inc()
		_, _ = tx.Exec(ctx, "insert into items values (1)") // the error swallowed
		return nil
	})
	if err != nil || runs.get() != 2 {
		t.Fatalf("err = %v, fn ran %d times; want success after a rerun", err, runs.get())
	}
	if n := queryInt(t, ctx, admin, "select count(*) from items"); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
}

// queryTracer records the statements a connection's QueryTracer sees.
type queryTracer struct {
	mu   chan struct{}
	sqls []string
}

func (q *queryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	q.mu <- struct{}{}
	q.sqls = append(q.sqls, d.SQL)
	<-q.mu
	return ctx
}

func (q *queryTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestQueryTracerSeesFnStatements: a pgx QueryTracer sees every statement
// of fn, the first one (sent by pgtx with BEGIN) included, as under
// pgx.BeginTxFunc.
func TestQueryTracerSeesFnStatements(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	for _, first := range []struct {
		name string
		run  func(ctx context.Context, tx pgx.Tx) error
		sql  string
	}{
		{"Exec", func(ctx context.Context, tx pgx.Tx) error { _, err := tx.Exec(ctx, "select 1"); return err }, "select 1"},
		{"Exec with args", func(ctx context.Context, tx pgx.Tx) error { _, err := tx.Exec(ctx, "select $1::int", 1); return err }, "select $1::int"},
		{"QueryRow", func(ctx context.Context, tx pgx.Tx) error {
			var n int
			return tx.QueryRow(ctx, "select $1::int + 1", 1).Scan(&n)
		}, "select $1::int + 1"},
	} {
		t.Run(first.name, func(t *testing.T) {
			qt := &queryTracer{mu: make(chan struct{}, 1)}
			pool := newPool(t, dsn, func(c *pgtx.Config) { c.ConnConfig.Tracer = qt })
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				if err := first.run(ctx, tx); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "select 2")
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			qt.mu <- struct{}{}
			sqls := append([]string(nil), qt.sqls...)
			<-qt.mu
			var sawFirst, sawSecond bool
			for _, s := range sqls {
				sawFirst = sawFirst || s == first.sql
				sawSecond = sawSecond || s == "select 2"
			}
			if !sawFirst || !sawSecond {
				t.Errorf("the tracer saw %q; want %q and %q among them", sqls, first.sql, "select 2")
			}
		})
	}
}

// TestFirstStatementForms: fn's first statement in the forms pgx's Exec
// accepts: several statements in one string without arguments (sent in
// the simple protocol, as pgx sends them), a statement that does not parse
// (its error is fn's, and the call fails without running anything), named
// arguments, and an exec mode chosen per statement.
func TestFirstStatementForms(t *testing.T) {
	ctx := testCtx(t)
	dsn := newDB(t)
	admin := directConn(t, dsn)
	mustExec(t, ctx, admin, "create table items (id int primary key)")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			mustExec(t, ctx, admin, "truncate items")
			pool := newPool(t, dsn, func(c *pgtx.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			for range 2 { // the second time from the caches
				mustExec(t, ctx, admin, "truncate items")
				err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "insert into items values (1); insert into items values (2)")
					return err
				})
				if err != nil {
					t.Fatalf("two statements in one string: %v", err)
				}
				if n := queryInt(t, ctx, admin, "select count(*) from items"); n != 2 {
					t.Errorf("two statements in one string: %d rows, want 2", n)
				}
			}
			// A trailing semicolon and a trailing line comment.
			err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "insert into items values (10); -- the last one")
				return err
			})
			if err != nil {
				t.Errorf("a trailing semicolon and comment: %v", err)
			}
			err = pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "selec 1")
				return err
			})
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "42601" {
				t.Errorf("a statement that does not parse: %v, want its 42601", err)
			}
			err = pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "insert into items values (@id)", pgx.NamedArgs{"id": 3})
				if err != nil {
					return err
				}
				var n int
				return tx.QueryRow(ctx, "select count(*) from items where id = $1", pgx.QueryExecModeSimpleProtocol, 3).Scan(&n)
			})
			if err != nil {
				t.Errorf("named arguments, then a per-statement exec mode: %v", err)
			}
			err = pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				var n int
				return tx.QueryRow(ctx, "select count(*) from items where id = $1", pgx.QueryExecModeExec, 3).Scan(&n)
			})
			if err != nil {
				t.Errorf("a per-statement exec mode first: %v", err)
			}
		})
	}
}
