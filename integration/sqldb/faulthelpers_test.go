package sqldb

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver of the libraries' own ways
	"github.com/jmoiron/sqlx"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/integration/internal/itest"
	"github.com/pgtx-go/pgtx/pgtxgorm"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"github.com/pgtx-go/pgtx/pgtxsqlx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// bankSchema is every fault test's database: two accounts, a ledger of
// transfers (no key on the transfer's name, so a transfer applied twice
// shows), a hot row for lock holders, and fail_first_commit, the function
// of a deferred constraint trigger that fails the database's first COMMIT
// of a ledger row with a serialization failure the server itself raises
// (nextval is not undone by the rollback, so the rerun passes).
var bankSchema = pgtxtest.WithMigrations(fstest.MapFS{"0001_bank.sql": {Data: []byte(`
create table accounts (id int primary key, balance bigint not null);
insert into accounts values (1, 1000), (2, 1000);
create table ledger (seq bigserial primary key, transfer text not null, amount bigint not null);
create table hot (id int primary key, n int not null);
insert into hot values (1, 0);
create sequence commit_faults;
create function fail_first_commit() returns trigger language plpgsql as $$
begin
	if nextval('commit_faults') = 1 then
		raise exception 'injected at COMMIT' using errcode = '40001';
	end if;
	return null;
end $$;
`)}})

// failFirstCommitSQL arms fail_first_commit on the test's database.
const failFirstCommitSQL = `create constraint trigger ledger_fail_first_commit after insert on ledger
	deferrable initially deferred for each row execute function fail_first_commit()`

// stmts is what a transaction function runs its statements with, in the
// library's own way: database/sql's *sql.Tx, sqlx's *sqlx.Tx, GORM's
// session. SQL is written with ? placeholders, GORM's; the others rebind.
type stmts interface {
	exec(sql string, args ...any) error
	scalar(sql string, args ...any) (int64, error)
}

type sqlStmts struct {
	ctx context.Context
	tx  *sql.Tx
}

func (s sqlStmts) exec(q string, args ...any) error {
	_, err := s.tx.ExecContext(s.ctx, sqlx.Rebind(sqlx.DOLLAR, q), args...)
	return err
}

func (s sqlStmts) scalar(q string, args ...any) (n int64, err error) {
	err = s.tx.QueryRowContext(s.ctx, sqlx.Rebind(sqlx.DOLLAR, q), args...).Scan(&n)
	return n, err
}

type sqlxStmts struct {
	ctx context.Context
	tx  *sqlx.Tx
}

func (s sqlxStmts) exec(q string, args ...any) error {
	_, err := s.tx.ExecContext(s.ctx, s.tx.Rebind(q), args...)
	return err
}

func (s sqlxStmts) scalar(q string, args ...any) (n int64, err error) {
	err = s.tx.GetContext(s.ctx, &n, s.tx.Rebind(q), args...)
	return n, err
}

type gormStmts struct{ tx *gorm.DB }

func (s gormStmts) exec(q string, args ...any) error { return s.tx.Exec(q, args...).Error }

func (s gormStmts) scalar(q string, args ...any) (n int64, err error) {
	err = s.tx.Raw(q, args...).Scan(&n).Error
	return n, err
}

// txFunc is a transaction's work.
type txFunc func(ctx context.Context, s stmts) error

// runner runs transactions in one way, on a database/sql pool.
type runner struct {
	db   *sql.DB    // database/sql's pool under the library
	pool *pgtx.Pool // pgtx's ways only
	// retryBroken makes a hand-written loop also run the transaction again
	// when its connection broke, as many loops do.
	retryBroken bool
	tx          func(ctx context.Context, fn txFunc) error
}

// openOpts is how a way opens its database.
type openOpts struct {
	mutate func(*pgtx.Config) // pgtx's ways: the pool's configuration
}

// way is a library's own way of running a transaction, or pgtx's module.
type way struct {
	lib, name string
	pgtx      bool
	open      func(t *testing.T, dsn string, o openOpts) *runner
}

func (w way) String() string { return w.lib + " " + w.name }

// handTries is how many times a hand-written loop runs a transaction.
const handTries = 5

// ways are the three libraries' own ways and pgtx's modules.
var ways = []way{
	{"database/sql", "hand-written loop", false, func(t *testing.T, dsn string, _ openOpts) *runner {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		r := &runner{db: db}
		r.tx = func(ctx context.Context, fn txFunc) error {
			return handLoop(r.retryBroken, func() error {
				tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
				if err != nil {
					return err
				}
				if err := fn(ctx, sqlStmts{ctx, tx}); err != nil {
					_ = tx.Rollback()
					return err
				}
				return tx.Commit()
			})
		}
		return r
	}},
	{"database/sql", "pgtxsql.Transaction", true, func(t *testing.T, dsn string, o openOpts) *runner {
		pool := itest.NewPool(t, dsn, o.mutate)
		db := pgtxsql.OpenDB(pool)
		t.Cleanup(func() { db.Close() })
		return &runner{db: db, pool: pool, tx: func(ctx context.Context, fn txFunc) error {
			return pgtxsql.Transaction(ctx, db, pgtx.ReadCommitted, func(ctx context.Context, tx *sql.Tx) error {
				return fn(ctx, sqlStmts{ctx, tx})
			})
		}}
	}},
	{"sqlx", "hand-written loop", false, func(t *testing.T, dsn string, _ openOpts) *runner {
		db, err := sqlx.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		r := &runner{db: db.DB}
		r.tx = func(ctx context.Context, fn txFunc) error {
			return handLoop(r.retryBroken, func() error {
				tx, err := db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
				if err != nil {
					return err
				}
				if err := fn(ctx, sqlxStmts{ctx, tx}); err != nil {
					_ = tx.Rollback()
					return err
				}
				return tx.Commit()
			})
		}
		return r
	}},
	{"sqlx", "pgtxsqlx.Transaction", true, func(t *testing.T, dsn string, o openOpts) *runner {
		pool := itest.NewPool(t, dsn, o.mutate)
		db := pgtxsqlx.OpenDB(pool)
		t.Cleanup(func() { db.Close() })
		return &runner{db: db.DB, pool: pool, tx: func(ctx context.Context, fn txFunc) error {
			return pgtxsqlx.Transaction(ctx, db, pgtx.ReadCommitted, func(ctx context.Context, tx *sqlx.Tx) error {
				return fn(ctx, sqlxStmts{ctx, tx})
			})
		}}
	}},
	{"GORM", "db.Transaction", false, func(t *testing.T, dsn string, _ openOpts) *runner {
		gdb, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		db := sqlDBOf(t, gdb)
		return &runner{db: db, tx: func(ctx context.Context, fn txFunc) error {
			return gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				return fn(ctx, gormStmts{tx})
			}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		}}
	}},
	{"GORM", "pgtxgorm.Transaction", true, func(t *testing.T, dsn string, o openOpts) *runner {
		pool := itest.NewPool(t, dsn, o.mutate)
		gdb, err := gorm.Open(pgtxgorm.Dialector(pool), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		db := sqlDBOf(t, gdb)
		return &runner{db: db, pool: pool, tx: func(ctx context.Context, fn txFunc) error {
			return pgtxgorm.Transaction(ctx, gdb, pgtx.ReadCommitted, func(tx *gorm.DB) error {
				return fn(tx.Statement.Context, gormStmts{tx})
			})
		}}
	}},
}

// sqlDBOf returns gdb's *sql.DB, closed when the test ends.
func sqlDBOf(t *testing.T, gdb *gorm.DB) *sql.DB {
	t.Helper()
	db, err := gdb.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// handLoop is the retry loop applications write around database/sql: run
// the transaction again on a serialization failure or a deadlock, and, with
// retryBroken, when its connection broke, up to handTries times.
func handLoop(retryBroken bool, attempt func() error) error {
	for i := 1; ; i++ {
		err := attempt()
		if err == nil || i == handTries || !(conflict(err) || retryBroken && broken(err)) {
			return err
		}
	}
}

// conflict tells a serialization failure or a deadlock.
func conflict(err error) bool {
	s := itest.SQLState(err)
	return s == "40001" || s == "40P01"
}

// broken tells an error of a connection that broke, as loops that also
// retry those tell it: pgconn.SafeToRetry (pgx's word that nothing was
// sent), database/sql's ErrBadConn, an end of stream, a network error.
func broken(err error) bool {
	var ne net.Error
	return pgconn.SafeToRetry(err) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.EOF) || errors.As(err, &ne)
}

// transfer moves amount from account 1 to 2 and writes the ledger row id;
// runs counts its runs.
func transfer(id string, amount int64, runs *int) txFunc {
	return func(_ context.Context, s stmts) error {
		*runs++
		if err := s.exec("insert into ledger (transfer, amount) values (?, ?)", id, amount); err != nil {
			return err
		}
		if err := s.exec("update accounts set balance = balance - ? where id = 1", amount); err != nil {
			return err
		}
		return s.exec("update accounts set balance = balance + ? where id = 2", amount)
	}
}

func mustExec(t *testing.T, conn *pgx.Conn, q string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(itest.Ctx(t), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func queryInt(t *testing.T, conn *pgx.Conn, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(itest.Ctx(t), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// ledger is what the server holds of transfer id: its ledger rows and
// account 1's balance.
func ledger(t *testing.T, admin *pgx.Conn, id string) (rows, balance int64) {
	t.Helper()
	return queryInt(t, admin, "select count(*) from ledger where transfer = $1", id),
		queryInt(t, admin, "select balance from accounts where id = 1")
}

// serverOffset is the server's clock minus this process's, from the
// quickest of a few round trips.
func serverOffset(t *testing.T, conn *pgx.Conn) time.Duration {
	t.Helper()
	best, off := time.Duration(1<<62), time.Duration(0)
	for range 5 {
		var at time.Time
		t0 := time.Now()
		if err := conn.QueryRow(itest.Ctx(t), "select clock_timestamp()").Scan(&at); err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(t0); rtt < best {
			best, off = rtt, at.Sub(t0.Add(rtt/2))
		}
	}
	return off
}

// faultTable collects a line per (library, way, fault) and logs them
// together when the test ends.
type faultTable struct {
	mu    sync.Mutex
	lines []tableLine
}

type tableLine struct {
	fault, way, sub int // the line's place in the table
	text            string
}

// add logs and keeps the line of way w (ways[wi]) under fault fi; sub
// orders lines of one way and fault.
func (f *faultTable) add(t *testing.T, fi, wi, sub int, w, fault, outcome string) {
	t.Helper()
	line := "| " + w + " | " + fault + " | " + outcome + " |"
	t.Log(line)
	f.mu.Lock()
	f.lines = append(f.lines, tableLine{fi, wi, sub, line})
	f.mu.Unlock()
}

// cell is a fault's and a way's place in the table.
type cell struct {
	ft     *faultTable
	fi, wi int
	fault  string
}

// add logs and keeps a line of the cell's; sub orders the lines of one
// cell, w names its way.
func (c cell) add(t *testing.T, sub int, w, outcome string) {
	t.Helper()
	c.ft.add(t, c.fi, c.wi, sub, w, c.fault, outcome)
}

func (f *faultTable) String() string {
	f.mu.Lock()
	ls := slices.Clone(f.lines)
	f.mu.Unlock()
	slices.SortFunc(ls, func(a, b tableLine) int {
		return cmp.Or(cmp.Compare(a.fault, b.fault), cmp.Compare(a.way, b.way), cmp.Compare(a.sub, b.sub))
	})
	var sb strings.Builder
	sb.WriteString("| library and way | fault | what happened |\n|---|---|---|")
	for _, l := range ls {
		sb.WriteString("\n" + l.text)
	}
	return sb.String()
}
