package connstate

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// StmtCacheSize bounds the statements a connection keeps for its first
// writes: pgtx's own and the first statements of fn.
const StmtCacheSize = 128

// Stmts is a connection's statement descriptions for its first writes.
// With QueryExecModeCacheStatement they are prepared statements of the
// server, named pgtx_<n>; with QueryExecModeCacheDescribe descriptions
// only, and the statements go unnamed (safe behind a transaction-mode
// pooler), as pgx sends them in those modes.
type Stmts struct {
	On    bool // the connection's exec mode is one of those
	Named bool // QueryExecModeCacheStatement
	// XidPrepared: the id reads are prepared in SQL (PREPARE pgtx_xid...),
	// for the first statements sent in the simple protocol, which pgx's
	// Exec sends without arguments.
	XidPrepared bool
	// Builder encodes the arguments of fn's first statement, and Millis is
	// the statement_timeout parameter's text: kept with the connection so
	// that a first write allocates neither.
	Builder pgx.ExtendedQueryBuilder
	Millis  []byte

	m map[string]*pgconn.StatementDescription
	n int
}

// Preparer is what the cache needs of a connection: *pgconn.PgConn.
type Preparer interface {
	Prepare(ctx context.Context, name, sql string, paramOIDs []uint32) (*pgconn.StatementDescription, error)
	Deallocate(ctx context.Context, name string) error
}

// SetMode sets the cache up for a connection's exec mode.
func (c *Stmts) SetMode(mode pgx.QueryExecMode) {
	c.On = mode == pgx.QueryExecModeCacheStatement || mode == pgx.QueryExecModeCacheDescribe
	c.Named = mode == pgx.QueryExecModeCacheStatement
}

// Get returns the description of sql, preparing it on conn (one round
// trip) the first time. A full cache forgets one statement first, and
// deallocates it when it is named.
func (c *Stmts) Get(ctx context.Context, conn Preparer, sql string) (*pgconn.StatementDescription, error) {
	if sd := c.m[sql]; sd != nil {
		return sd, nil
	}
	if c.m == nil {
		c.m = make(map[string]*pgconn.StatementDescription)
	}
	if len(c.m) >= StmtCacheSize {
		for k, sd := range c.m {
			delete(c.m, k)
			if sd.Name != "" {
				if err := conn.Deallocate(ctx, sd.Name); err != nil {
					return nil, err
				}
			}
			break
		}
	}
	name := ""
	if c.Named {
		c.n++
		name = "pgtx_" + strconv.Itoa(c.n)
	}
	sd, err := conn.Prepare(ctx, name, sql, nil)
	if err != nil {
		return nil, err
	}
	c.m[sql] = sd
	return sd, nil
}

// Len returns how many statements the cache holds.
func (c *Stmts) Len() int { return len(c.m) }

// Invalidate forgets what a failed statement's error says is stale: every
// named statement when one no longer exists (a DEALLOCATE ALL or DISCARD
// ALL of fn's), sql's description when its result type changed.
func (c *Stmts) Invalidate(sql string, err error) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return
	}
	switch pgErr.Code {
	case "26000": // invalid_sql_statement_name
		clear(c.m)
		c.XidPrepared = false
	case "0A000": // feature_not_supported: cached plan must not change result type
		delete(c.m, sql)
	}
}

// Add appends sd's execution to b: by name when the server prepared it,
// with its text otherwise.
func (c *Stmts) Add(b *pgconn.Batch, sd *pgconn.StatementDescription, values [][]byte, formats, results []int16) {
	if sd.Name != "" {
		b.ExecStatement(sd, values, formats, results)
		return
	}
	b.ExecParams(sd.SQL, values, sd.ParamOIDs, formats, results)
}
