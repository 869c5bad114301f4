package pgtx

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// The first write in the exec modes that cache statements
// (QueryExecModeCacheStatement, QueryExecModeCacheDescribe), sent as one
// protocol batch: pgx's Batch would run it as a pipeline, which costs some
// forty allocations more than pgx's own transaction.

// stmtCacheSize bounds the statements a connection keeps for its first
// writes: pgtx's own and the first statements of fn.
const stmtCacheSize = 128

// stmtCache is a connection's statement descriptions for its first writes.
// With QueryExecModeCacheStatement they are prepared statements of the
// server, named pgtx_<n>; with QueryExecModeCacheDescribe descriptions
// only, and the statements go unnamed (safe behind a transaction-mode
// pooler), as pgx sends them in those modes.
type stmtCache struct {
	on    bool // the connection's exec mode is one of those
	named bool // QueryExecModeCacheStatement
	m     map[string]*pgconn.StatementDescription
	// xidPrepared: the id reads are prepared in SQL (PREPARE pgtx_xid...),
	// for the first statements sent in the simple protocol, which pgx's
	// Exec sends without arguments.
	xidPrepared bool
	n           int
	eqb         pgx.ExtendedQueryBuilder
	ms          []byte // the statement_timeout parameter's text
}

// setMode sets the cache up for a connection's exec mode.
func (c *stmtCache) setMode(mode pgx.QueryExecMode) {
	c.on = mode == pgx.QueryExecModeCacheStatement || mode == pgx.QueryExecModeCacheDescribe
	c.named = mode == pgx.QueryExecModeCacheStatement
}

// get returns the description of sql, preparing it (one round trip) the
// first time.
func (c *stmtCache) get(ctx context.Context, pgConn *pgconn.PgConn, sql string) (*pgconn.StatementDescription, error) {
	if sd := c.m[sql]; sd != nil {
		return sd, nil
	}
	if c.m == nil {
		c.m = make(map[string]*pgconn.StatementDescription)
	}
	if len(c.m) >= stmtCacheSize {
		for k, sd := range c.m {
			delete(c.m, k)
			if sd.Name != "" {
				if err := pgConn.Deallocate(ctx, sd.Name); err != nil {
					return nil, err
				}
			}
			break
		}
	}
	name := ""
	if c.named {
		c.n++
		name = "pgtx_" + strconv.Itoa(c.n)
	}
	sd, err := pgConn.Prepare(ctx, name, sql, nil)
	if err != nil {
		return nil, err
	}
	c.m[sql] = sd
	return sd, nil
}

// invalidate forgets what a failed statement's error says is stale: every
// named statement when one no longer exists (a DEALLOCATE ALL or DISCARD
// ALL of fn's), sql's description when its result type changed.
func (c *stmtCache) invalidate(sql string, err error) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return
	}
	switch pgErr.Code {
	case "26000": // invalid_sql_statement_name
		clear(c.m)
		c.xidPrepared = false
	case "0A000": // feature_not_supported: cached plan must not change result type
		delete(c.m, sql)
	}
}

// prepareXidSQL prepares the id reads of a direct connection, for
// executeXidSQLs.
const prepareXidSQL = "prepare pgtx_xid as " + idSQL + "; prepare pgtx_xid_forced as " + idForcedSQL

// executeXidNames are the names of the id reads prepareXidSQL prepares,
// without and with assigning an id, and executeXidSQLs run them.
var (
	executeXidNames = [2]string{"pgtx_xid", "pgtx_xid_forced"}
	executeXidSQLs  = [2]string{"execute pgtx_xid", "execute pgtx_xid_forced"}
)

// add appends sd's execution to b.
func (c *stmtCache) add(b *pgconn.Batch, sd *pgconn.StatementDescription, values [][]byte, formats, results []int16) {
	if sd.Name != "" {
		b.ExecStatement(sd, values, formats, results)
		return
	}
	b.ExecParams(sd.SQL, values, sd.ParamOIDs, formats, results)
}

// firstLean sends BEGIN and its statement_timeout (when the statement is
// the first), fn's statement (sql, args) and the id read in one batch, and
// returns the results positioned on fn's statement. An error before anything is sent (a statement that does not
// parse, arguments that do not encode) sends no BEGIN either.
func (t *attemptTx) firstLean(ctx context.Context, c *stmtCache, sql string, args []any) (*pgconn.MultiResultReader, error) {
	pgConn := t.pgConn
	first := !t.begun
	beginSQL := beginSQLs[t.a.iso][b2i(t.a.opts.ReadOnly)][b2i(t.a.opts.Deferrable)]
	sd, err := c.get(ctx, pgConn, sql)
	if err != nil {
		return nil, err
	}
	var beginSD, timeoutSD, idSD *pgconn.StatementDescription
	if first {
		if beginSD, err = c.get(ctx, pgConn, beginSQL); err != nil {
			return nil, err
		}
	}
	ms, setTimeout := t.a.statementTimeout(ctx)
	setTimeout = setTimeout && first
	if setTimeout {
		if timeoutSD, err = c.get(ctx, pgConn, setTimeoutSQL); err != nil {
			return nil, err
		}
	}
	if t.capture != captureNone {
		if idSD, err = c.get(ctx, pgConn, idSQLs[t.capture][b2i(t.notify)]); err != nil {
			return nil, err
		}
	}
	if err := c.eqb.Build(t.conn.TypeMap(), sd, args); err != nil {
		return nil, err
	}

	b := &pgconn.Batch{}
	skip := 0
	if first {
		c.add(b, beginSD, nil, nil, nil)
		skip = 1
	}
	if setTimeout {
		c.ms = strconv.AppendInt(c.ms[:0], ms, 10)
		c.add(b, timeoutSD, [][]byte{c.ms}, nil, nil)
		skip = 2
	}
	c.add(b, sd, c.eqb.ParamValues, c.eqb.ParamFormats, c.eqb.ResultFormats)
	if idSD != nil {
		c.add(b, idSD, nil, nil, nil)
	}
	t.begun = true
	mrr := pgConn.ExecBatch(ctx, b)
	for range skip {
		if !mrr.NextResult() {
			break
		}
		if _, err = mrr.ResultReader().Close(); err != nil {
			break
		}
		skip--
	}
	if skip > 0 {
		err = mrr.Close()
		if err == nil {
			err = errors.New("pgtx: BEGIN did not run")
		}
		t.beginErr = err
		c.invalidate(beginSQL, err)
		return nil, err
	}
	if !mrr.NextResult() {
		err = mrr.Close()
		if err == nil {
			err = errors.New("pgtx: the statement did not run")
		}
		c.invalidate(sql, err)
		return nil, err
	}
	return mrr, nil
}

// finishLean reads the id after fn's statement (if it was queued), and
// ends the batch; stmtErr is the statement's own error, which wins.
func (t *attemptTx) finishLean(c *stmtCache, mrr *pgconn.MultiResultReader, sql string, stmtErr error) error {
	if stmtErr == nil && t.capture != captureNone && mrr.NextResult() {
		_ = t.readID(mrr.ResultReader()) // its error is the batch's too: mrr.Close returns it
	}
	err := mrr.Close()
	if stmtErr != nil {
		err = stmtErr
	}
	if err != nil {
		t.idRead = false
		c.invalidate(sql, err)
	}
	return err
}

// readID reads the id, in text, and behind a pooler the server's run, and
// returns the read's error.
func (t *attemptTx) readID(rr *pgconn.ResultReader) error {
	var got, null bool
	var xid uint64
	var run resolve.Run
	var flushed int64
	for rr.NextRow() {
		if v := rr.Values(); len(v) > 0 {
			got, null = true, v[0] == nil
			xid, _ = resolve.ParseUint(v[0])
			if len(v) == 5 {
				run, flushed = resolve.ParseRun(v[1:])
			}
		}
	}
	if _, err := rr.Close(); err != nil || !got {
		return err
	}
	t.idRead, t.idNull, t.id.Xid = true, null, xid
	if t.capture == captureIDRun {
		t.id.Run, t.id.Flushed = run, flushed
	}
	return nil
}

// leanExec runs fn's first statement with arguments after BEGIN.
func (t *attemptTx) leanExec(ctx context.Context, c *stmtCache, sql string, args []any) (tag pgconn.CommandTag, err error) {
	ctx, end := t.traceQuery(ctx, sql, args)
	defer func() { end(tag, err) }()
	mrr, err := t.firstLean(ctx, c, sql, args)
	if err != nil {
		return tag, err
	}
	tag, err = mrr.ResultReader().Close()
	return tag, t.finishLean(c, mrr, sql, err)
}

// leanQuery runs fn's first query after BEGIN; closing the rows reads the
// id and ends the batch.
func (t *attemptTx) leanQuery(ctx context.Context, c *stmtCache, sql string, args []any) (pgx.Rows, error) {
	ctx, end := t.traceQuery(ctx, sql, args)
	mrr, err := t.firstLean(ctx, c, sql, args)
	if err != nil {
		end(pgconn.CommandTag{}, err)
		return errRows{err}, err
	}
	r := &firstRows{Rows: pgx.RowsFromResultReader(t.conn.TypeMap(), mrr.ResultReader()), conn: t.conn, end: end}
	r.close = func() error { return t.finishLean(c, mrr, sql, r.Rows.Err()) }
	return r, nil
}
