package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxgorm"
	"github.com/pgtx-go/pgtx/pgtxsql"
	"github.com/pgtx-go/pgtx/pgtxsqlx"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// The libraries of the sql scenario, and their contenders: each library's
// own transaction helper, and pgtx's module for it.
const (
	libSQL  = "database/sql"
	libSQLX = "sqlx"
	libGORM = "GORM"

	nameSQLOwn     = "db.BeginTx, tx.Commit (pgx stdlib)"
	nameSQLControl = "db.BeginTx again (A/A control)"
	nameSQLPgtx    = "pgtxsql.Transaction"
	nameSQLXOwn    = "db.BeginTxx, tx.Commit (pgx stdlib)"
	nameSQLXPgtx   = "pgtxsqlx.Transaction"
	nameGORMOwn    = "db.Transaction (gorm.io/driver/postgres)"
	nameGORMPgtx   = "pgtxgorm.Transaction"
	// nameSQLJitter is the full-jitter loop over database/sql, the sql
	// scenario's contention baseline.
	nameSQLJitter = "full-jitter loop over database/sql"
)

// sqlWorkload is a transaction the sql scenario measures, in each
// library's idiom.
type sqlWorkload struct {
	name string
	sql  func(ctx context.Context, tx *sql.Tx) error
	sqlx func(ctx context.Context, tx *sqlx.Tx) error
	gorm func(tx *gorm.DB) error
}

const updateOneSQL = "update overhead_rows set n = n + 1 where id = $1"

// sqlWorkloads are the overhead scenario's two transactions, through
// database/sql, sqlx and GORM.
var sqlWorkloads = []sqlWorkload{
	{
		name: "`select 1` (QueryRow, Scan)",
		sql: func(ctx context.Context, tx *sql.Tx) error {
			var n int
			return tx.QueryRowContext(ctx, "select 1").Scan(&n)
		},
		sqlx: func(ctx context.Context, tx *sqlx.Tx) error {
			var n int
			return tx.GetContext(ctx, &n, "select 1")
		},
		gorm: func(tx *gorm.DB) error {
			var n int
			return tx.Raw("select 1").Scan(&n).Error
		},
	},
	{
		name: "a one-row update (`" + updateOneSQL + "`)",
		sql: func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, updateOneSQL, rand.IntN(overheadRows)+1)
			return err
		},
		sqlx: func(ctx context.Context, tx *sqlx.Tx) error {
			_, err := tx.ExecContext(ctx, updateOneSQL, rand.IntN(overheadRows)+1)
			return err
		},
		gorm: func(tx *gorm.DB) error {
			return tx.Exec("update overhead_rows set n = n + 1 where id = ?", rand.IntN(overheadRows)+1).Error
		},
	},
}

// sqlContender is one way of running a workload's transaction through one
// of the libraries.
type sqlContender struct {
	lib, name string
	call      func(ctx context.Context, w sqlWorkload) error
}

// sqlSet is the sql scenario's contenders, each on a pool of its own.
type sqlSet struct {
	contenders []sqlContender
	fills      []execFunc // each contender's pool, to open its connections
	writes     []atomic.Int64
	closers    []func()
}

func (s *sqlSet) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// The contenders of the sql set, in order: each library's own helper, then
// pgtx's module for it; the A/A control after database/sql's.
const (
	sqlOwn = iota
	sqlControl
	sqlPgtx
	sqlxOwn
	sqlxPgtx
	gormOwn
	gormPgtx
	sqlContenders
)

// sqlPairs are the (own helper, pgtx module) pairs whose ratio the tables
// give; the control's pair is database/sql's own helper with itself.
var sqlPairs = [][2]int{{sqlOwn, sqlPgtx}, {sqlOwn, sqlControl}, {sqlxOwn, sqlxPgtx}, {gormOwn, gormPgtx}}

// newSQLSet opens a pool of maxConns connections for every contender, all
// open: the own helpers on pgx's stdlib (*sql.DB with MaxOpenConns and
// MaxIdleConns maxConns), pgtx's modules on a pgtx.Pool of maxConns with the
// default Config. When countWrites is set, contender i's connections count
// their socket writes in the set's writes[i].
func newSQLSet(ctx context.Context, e *env, maxConns int, countWrites bool) (*sqlSet, error) {
	s := &sqlSet{}
	if countWrites {
		s.writes = make([]atomic.Int64, sqlContenders)
	}
	dial := func(i int) func(ctx context.Context, network, addr string) (net.Conn, error) {
		if s.writes == nil {
			return nil
		}
		return countingDial(&s.writes[i])
	}
	// stdlibDB is what a user of pgx's stdlib opens (stdlib.OpenDB of the
	// parsed DSN, as gorm.io/driver/postgres's Open also does).
	stdlibDB := func(i int) (*sql.DB, error) {
		cfg, err := pgx.ParseConfig(e.dsn)
		if err != nil {
			return nil, err
		}
		if d := dial(i); d != nil {
			cfg.DialFunc = d
		}
		db := stdlib.OpenDB(*cfg)
		db.SetMaxOpenConns(maxConns)
		db.SetMaxIdleConns(maxConns)
		s.closers = append(s.closers, func() { _ = db.Close() })
		s.fills = append(s.fills, sqlExec(db))
		return db, nil
	}
	pgtxPool := func(i int) (*pgtx.Pool, error) {
		p, err := newPgtxPool(ctx, e.dsn, maxConns, func(c *pgtx.Config) {
			if d := dial(i); d != nil {
				c.ConnConfig.DialFunc = d
			}
		})
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, p.Close)
		s.fills = append(s.fills, p.Exec)
		return p, nil
	}
	quiet := &gorm.Config{Logger: logger.Discard}
	makers := []func(i int) (sqlContender, error){
		sqlOwn: func(i int) (sqlContender, error) {
			db, err := stdlibDB(i)
			return sqlOwnContender(libSQL, nameSQLOwn, db), err
		},
		sqlControl: func(i int) (sqlContender, error) {
			db, err := stdlibDB(i)
			return sqlOwnContender(libSQL, nameSQLControl, db), err
		},
		sqlPgtx: func(i int) (sqlContender, error) {
			p, err := pgtxPool(i)
			if err != nil {
				return sqlContender{}, err
			}
			db := pgtxsql.OpenDB(p)
			s.closers = append(s.closers, func() { _ = db.Close() })
			return sqlContender{libSQL, nameSQLPgtx, func(ctx context.Context, w sqlWorkload) error {
				return pgtxsql.Transaction(ctx, db, pgtx.ReadCommitted, w.sql)
			}}, nil
		},
		sqlxOwn: func(i int) (sqlContender, error) {
			db, err := stdlibDB(i)
			if err != nil {
				return sqlContender{}, err
			}
			x := sqlx.NewDb(db, "pgx")
			return sqlContender{libSQLX, nameSQLXOwn, func(ctx context.Context, w sqlWorkload) error {
				tx, err := x.BeginTxx(ctx, nil)
				if err != nil {
					return err
				}
				if err := w.sqlx(ctx, tx); err != nil {
					return errors.Join(err, tx.Rollback())
				}
				return tx.Commit()
			}}, nil
		},
		sqlxPgtx: func(i int) (sqlContender, error) {
			p, err := pgtxPool(i)
			if err != nil {
				return sqlContender{}, err
			}
			x := pgtxsqlx.OpenDB(p)
			s.closers = append(s.closers, func() { _ = x.Close() })
			return sqlContender{libSQLX, nameSQLXPgtx, func(ctx context.Context, w sqlWorkload) error {
				return pgtxsqlx.Transaction(ctx, x, pgtx.ReadCommitted, w.sqlx)
			}}, nil
		},
		gormOwn: func(i int) (sqlContender, error) {
			db, err := stdlibDB(i)
			if err != nil {
				return sqlContender{}, err
			}
			g, err := gorm.Open(postgres.New(postgres.Config{Conn: db}), quiet)
			if err != nil {
				return sqlContender{}, err
			}
			return sqlContender{libGORM, nameGORMOwn, func(ctx context.Context, w sqlWorkload) error {
				return g.WithContext(ctx).Transaction(w.gorm)
			}}, nil
		},
		gormPgtx: func(i int) (sqlContender, error) {
			p, err := pgtxPool(i)
			if err != nil {
				return sqlContender{}, err
			}
			g, err := gorm.Open(pgtxgorm.Dialector(p), quiet)
			if err != nil {
				return sqlContender{}, err
			}
			if db, err := g.DB(); err == nil {
				s.closers = append(s.closers, func() { _ = db.Close() })
			}
			return sqlContender{libGORM, nameGORMPgtx, func(ctx context.Context, w sqlWorkload) error {
				return pgtxgorm.Transaction(ctx, g, pgtx.ReadCommitted, w.gorm)
			}}, nil
		},
	}
	for i, mk := range makers {
		c, err := mk(i)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("the sql scenario's contender %d: %w", i, err)
		}
		s.contenders = append(s.contenders, c)
	}
	// The pools open their connections at once: connecting is most of a
	// repetition's setup.
	errs := make([]error, len(s.fills))
	var wg sync.WaitGroup
	for i, f := range s.fills {
		wg.Go(func() { errs[i] = fill(ctx, maxConns, f) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// sqlOwnContender is database/sql's own transaction, written by hand:
// BeginTx, the statement, Commit (Rollback when the statement failed).
func sqlOwnContender(lib, name string, db *sql.DB) sqlContender {
	return sqlContender{lib, name, func(ctx context.Context, w sqlWorkload) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := w.sql(ctx, tx); err != nil {
			return errors.Join(err, tx.Rollback())
		}
		return tx.Commit()
	}}
}

// sqlExec is db's ExecContext as an execFunc.
func sqlExec(db *sql.DB) execFunc {
	return func(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
		_, err := db.ExecContext(ctx, query, args...)
		return pgconn.CommandTag{}, err
	}
}

// sqlTally is what one contender's batches did in one repetition.
type sqlTally struct {
	ok, failed int64
	busy       time.Duration // wall time of its batches, summed over the workers
	lastErr    error
}

// tps is the tally's transactions per second: its successful calls over
// the time its batches took, times the workers, as if every worker ran it
// all the time (workers / mean latency).
func (t sqlTally) tps(workers int) float64 {
	return ratio(float64(t.ok)*float64(workers), t.busy.Seconds())
}

// sqlInterleaved runs workers goroutines for d; each makes overheadBatch
// calls with every contender in turn, the contenders in a random order each
// turn, as the overhead scenario does. It returns each contender's tally
// after joining every goroutine.
func sqlInterleaved(ctx context.Context, workers int, d time.Duration, seed uint64, cs []sqlContender, w sqlWorkload) []sqlTally {
	per := make([][]sqlTally, workers)
	start := time.Now()
	var wg sync.WaitGroup
	for wk := range workers {
		per[wk] = make([]sqlTally, len(cs))
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(wk)))
			for time.Since(start) < d && ctx.Err() == nil {
				for _, i := range rng.Perm(len(cs)) {
					t := &per[wk][i]
					t0 := time.Now()
					for range overheadBatch {
						callCtx, cancel := context.WithTimeout(ctx, callSafetyLimit)
						err := cs[i].call(callCtx, w)
						cancel()
						if err != nil {
							t.failed++
							t.lastErr = err
							continue
						}
						t.ok++
					}
					t.busy += time.Since(t0)
				}
			}
		})
	}
	wg.Wait()
	total := make([]sqlTally, len(cs))
	for wk := range workers {
		for i, t := range per[wk] {
			total[i].ok += t.ok
			total[i].failed += t.failed
			total[i].busy += t.busy
			if t.lastErr != nil {
				total[i].lastErr = t.lastErr
			}
		}
	}
	return total
}

// sqlRoundTrips counts, for each contender, socket writes per transaction
// over 200 sequential calls on one-connection pools: pgx flushes once per
// round trip.
func sqlRoundTrips(ctx context.Context, e *env, w sqlWorkload) ([]float64, error) {
	set, err := newSQLSet(ctx, e, 1, true)
	if err != nil {
		return nil, err
	}
	defer set.close()
	trips := make([]float64, len(set.contenders))
	const calls = 200
	for i, c := range set.contenders {
		if err := c.call(ctx, w); err != nil { // prepares the statement
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		w0 := set.writes[i].Load()
		for range calls {
			if err := c.call(ctx, w); err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
		}
		trips[i] = float64(set.writes[i].Load()-w0) / calls
	}
	return trips, nil
}
