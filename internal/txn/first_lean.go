package txn

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/connstate"
	"github.com/pgtx-go/pgtx/internal/errs"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// The first write in the exec modes that cache statements
// (QueryExecModeCacheStatement, QueryExecModeCacheDescribe), sent as one
// protocol batch: pgx's Batch would run it as a pipeline, which costs some
// forty allocations more than pgx's own transaction.

// prepareXidSQL prepares the id reads of a direct connection, for
// executeXidSQLs, by whether they write the record.
func prepareXidSQL(emit bool) string {
	reads := idSQLs[b2i(emit)][captureID]
	return "prepare pgtx_xid as " + reads[0] + "; prepare pgtx_xid_forced as " + reads[1]
}

// executeXidNames are the names of the id reads prepareXidSQL prepares,
// without and with assigning an id, and executeXidSQLs run them.
var (
	executeXidNames = [2]string{"pgtx_xid", "pgtx_xid_forced"}
	executeXidSQLs  = [2]string{"execute pgtx_xid", "execute pgtx_xid_forced"}
)

// firstLean sends BEGIN and its statement_timeout (when the statement is
// the first), fn's statement (sql, args) and the id read in one batch, and
// returns the results positioned on fn's statement. An error before
// anything is sent (a statement that does not parse, arguments that do
// not encode) sends no BEGIN either.
func (t *Tx) firstLean(ctx context.Context, c *connstate.Stmts, sql string, args []any) (*pgconn.MultiResultReader, error) {
	pgConn := t.pgConn
	first := !t.begun
	beginSQL := t.beginSQL
	sd, err := c.Get(ctx, pgConn, sql)
	if err != nil {
		return nil, err
	}
	var beginSD, timeoutSD, idSD *pgconn.StatementDescription
	if first {
		if beginSD, err = c.Get(ctx, pgConn, beginSQL); err != nil {
			return nil, err
		}
	}
	ms, setTimeout := statementTimeout(ctx, t.timeout, t.s.SessionTimeout)
	setTimeout = setTimeout && first
	if setTimeout {
		if timeoutSD, err = c.Get(ctx, pgConn, setTimeoutSQL); err != nil {
			return nil, err
		}
	}
	if t.capture != captureNone {
		if idSD, err = c.Get(ctx, pgConn, t.idReadSQL()); err != nil {
			return nil, err
		}
	}
	if err := c.Builder.Build(t.conn.TypeMap(), sd, args); err != nil {
		return nil, err
	}

	b := &pgconn.Batch{}
	skip := 0
	if first {
		c.Add(b, beginSD, nil, nil, nil)
		skip = 1
	}
	if setTimeout {
		c.Millis = strconv.AppendInt(c.Millis[:0], ms, 10)
		c.Add(b, timeoutSD, [][]byte{c.Millis}, nil, nil)
		skip = 2
	}
	c.Add(b, sd, c.Builder.ParamValues, c.Builder.ParamFormats, c.Builder.ResultFormats)
	if idSD != nil {
		c.Add(b, idSD, nil, nil, nil)
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
		c.Invalidate(beginSQL, err)
		return nil, err
	}
	if !mrr.NextResult() {
		err = mrr.Close()
		if err == nil {
			err = errors.New("pgtx: the statement did not run")
		}
		c.Invalidate(sql, err)
		return nil, err
	}
	return mrr, nil
}

// finishLean reads the id after fn's statement (if it was queued), and
// ends the batch; stmtErr is the statement's own error, which wins.
func (t *Tx) finishLean(c *connstate.Stmts, mrr *pgconn.MultiResultReader, sql string, stmtErr error) error {
	if stmtErr == nil && t.capture != captureNone && mrr.NextResult() {
		_ = t.readID(mrr.ResultReader()) // its error is the batch's too: mrr.Close returns it
	}
	err := mrr.Close()
	if stmtErr != nil {
		err = stmtErr
	}
	if err != nil {
		t.idRead = false
		c.Invalidate(sql, err)
	}
	return err
}

// readID reads the id and its record's end, in text, and behind a pooler
// the server's run, and returns the read's error.
func (t *Tx) readID(rr *pgconn.ResultReader) error {
	var r idRow
	got := false
	for rr.NextRow() {
		if row, ok := parseIDRow(rr.Values()); ok {
			r, got = row, true
		}
	}
	if _, err := rr.Close(); err != nil || !got {
		return err
	}
	t.setID(r)
	return nil
}

// idRow is what one row of an id read says.
type idRow struct {
	xid, lsn uint64
	null     bool
	run      resolve.Run
	flushed  int64
}

// parseIDRow parses a row of an id read, in text: the id, its record's
// end, and behind a pooler the server's run.
func parseIDRow(v [][]byte) (r idRow, ok bool) {
	if len(v) < 2 {
		return r, false
	}
	r.null = v[0] == nil
	r.xid, _ = resolve.ParseUint(v[0])
	r.lsn, _ = resolve.ParseUint(v[1])
	if len(v) == 6 {
		r.run, r.flushed = resolve.ParseRun(v[2:])
	}
	return r, true
}

// setID records what an id read found.
func (t *Tx) setID(r idRow) {
	t.idRead, t.idNull, t.id.Xid, t.id.LSN = true, r.null, r.xid, int64(r.lsn)
	if t.capture == captureIDRun {
		t.id.Run, t.id.Flushed = r.run, r.flushed
	}
}

// leanExec runs fn's first statement with arguments after BEGIN.
func (t *Tx) leanExec(ctx context.Context, c *connstate.Stmts, sql string, args []any) (tag pgconn.CommandTag, err error) {
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
func (t *Tx) leanQuery(ctx context.Context, c *connstate.Stmts, sql string, args []any) (pgx.Rows, error) {
	ctx, end := t.traceQuery(ctx, sql, args)
	mrr, err := t.firstLean(ctx, c, sql, args)
	if err != nil {
		end(pgconn.CommandTag{}, err)
		return errs.NewRows(err), err
	}
	r := &firstRows{Rows: pgx.RowsFromResultReader(t.conn.TypeMap(), mrr.ResultReader()), conn: t.conn, end: end}
	r.close = func() error { return t.finishLean(c, mrr, sql, r.Rows.Err()) }
	return r, nil
}
