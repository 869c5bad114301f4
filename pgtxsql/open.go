package pgtxsql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"time"

	"github.com/pgtx-go/pgtx"
)

// OpenDB returns a *sql.DB whose connections are pool's. Closing it does not
// close pool. The *sql.DB keeps no connection of its own: a connection goes
// back to pool when database/sql releases it, so the two share pool's
// limits.
func OpenDB(pool *pgtx.Pool) *sql.DB {
	return open(pool, false)
}

// Open opens a [pgtx.Pool] for connString, as [pgtx.New] does, and returns
// a *sql.DB over it, as [OpenDB] does; closing the *sql.DB closes the pool.
func Open(ctx context.Context, connString string) (*sql.DB, error) {
	pool, err := pgtx.New(ctx, connString)
	if err != nil {
		return nil, err
	}
	return open(pool, true), nil
}

func open(pool *pgtx.Pool, owned bool) *sql.DB {
	c := &connector{pool: pool, owned: owned}
	c.drv = &sqlDriver{c: c}
	if pool != nil {
		cfg := pool.Config()
		c.acquireTimeout = timeout(cfg.AcquireTimeout, 2*time.Second)
		c.commitTimeout = timeout(cfg.CommitTimeout, 5*time.Second)
		c.rollbackTimeout = timeout(cfg.RollbackTimeout, 2*time.Second)
	}
	db := sql.OpenDB(c)
	// As pgx's stdlib.OpenDBFromPool: idle connections are the pool's.
	db.SetMaxIdleConns(0)
	return db
}

// Pool returns the [pgtx.Pool] under db, or nil when db was not opened by
// [Open] or [OpenDB].
func Pool(db *sql.DB) *pgtx.Pool {
	c := connectorOf(db)
	if c == nil {
		return nil
	}
	return c.pool
}

func connectorOf(db *sql.DB) *connector {
	if db == nil {
		return nil
	}
	d, ok := db.Driver().(*sqlDriver)
	if !ok {
		return nil
	}
	return d.c
}

// connector makes the *sql.DB's connections, which take a connection of
// pool only when a statement needs one.
type connector struct {
	pool  *pgtx.Pool
	owned bool // Open made pool: closing the *sql.DB closes it
	drv   *sqlDriver
	// pgtx.Config's AcquireTimeout, CommitTimeout and RollbackTimeout, as
	// the pool resolves them (0: none).
	acquireTimeout, commitTimeout, rollbackTimeout time.Duration
	shapes                                         shapes
}

const errNoPool = invalidArg("pgtxsql: the *sql.DB has no pgtx.Pool: make it over a pool from pgtx.New, " +
	"with pgtxsql.OpenDB(pool), pgtxsqlx.OpenDB(pool) or gorm.Open(pgtxgorm.Dialector(pool))")

// Connect implements [driver.Connector]; it makes no connection.
func (c *connector) Connect(context.Context) (driver.Conn, error) {
	if c.pool == nil {
		return nil, errNoPool
	}
	return &conn{c: c}, nil
}

// Driver implements [driver.Connector].
func (c *connector) Driver() driver.Driver { return c.drv }

// Close implements [io.Closer], which *sql.DB's Close calls.
func (c *connector) Close() error {
	if c.owned {
		c.pool.Close()
	}
	return nil
}

// sqlDriver is the [driver.Driver] of the *sql.DBs this package opens; it
// is not registered, and opens nothing by name.
type sqlDriver struct{ c *connector }

const errOpenByName = invalidArg("pgtxsql: open a *sql.DB with pgtxsql.Open or pgtxsql.OpenDB, not by a driver name")

// Open implements [driver.Driver].
func (d *sqlDriver) Open(string) (driver.Conn, error) { return nil, errOpenByName }

// timeout is a setting of pgtx.Config as the pool resolves it: 0 the
// default, negative none (0 here).
func timeout(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}
