package txn

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/connstate"
	"github.com/pgtx-go/pgtx/internal/errs"
)

// The first write in the exec modes that cache statements
// (QueryExecModeCacheStatement, QueryExecModeCacheDescribe), sent as one
// protocol batch: pgx's Batch would run it as a pipeline, which costs some
// forty allocations more than pgx's own transaction.

// firstLean sends BEGIN and its statement_timeout (when the statement is
// the first), fn's statement (sql, args) and the id read in one batch, and
// returns the results positioned on fn's statement. An error before
// anything is sent (a statement that does not parse, arguments that do
// not encode) sends no BEGIN either.
func (w *writer) firstLean(ctx context.Context, c *connstate.Stmts, sql string, args []any) (*pgconn.MultiResultReader, error) {
	pgConn := w.pgConn
	first := !w.begun
	beginSQL := w.beginSQL
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
	ms, setTimeout := statementTimeout(ctx, w.timeout, w.s.SessionTimeout)
	setTimeout = setTimeout && first
	if setTimeout {
		if timeoutSD, err = c.Get(ctx, pgConn, setTimeoutSQL); err != nil {
			return nil, err
		}
	}
	if w.track.capture != captureNone {
		if idSD, err = c.Get(ctx, pgConn, w.track.readSQL()); err != nil {
			return nil, err
		}
	}
	if err := c.Builder.Build(w.conn.TypeMap(), sd, args); err != nil {
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
	w.begun = true
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
		w.beginErr = err
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
func (w *writer) finishLean(c *connstate.Stmts, mrr *pgconn.MultiResultReader, sql string, stmtErr error) error {
	if stmtErr == nil && w.track.capture != captureNone && mrr.NextResult() {
		_ = w.track.readID(mrr.ResultReader()) // its error is the batch's too: mrr.Close returns it
	}
	err := mrr.Close()
	if stmtErr != nil {
		err = stmtErr
	}
	if err != nil {
		w.track.idRead = false
		c.Invalidate(sql, err)
	}
	return err
}

// leanExec runs fn's first statement with arguments after BEGIN.
func (w *writer) leanExec(ctx context.Context, c *connstate.Stmts, sql string, args []any) (tag pgconn.CommandTag, err error) {
	ctx, end := w.traceQuery(ctx, sql, args)
	defer func() { end(tag, err) }()
	mrr, err := w.firstLean(ctx, c, sql, args)
	if err != nil {
		return tag, err
	}
	tag, err = mrr.ResultReader().Close()
	return tag, w.finishLean(c, mrr, sql, err)
}

// leanQuery runs fn's first query after BEGIN; closing the rows reads the
// id and ends the batch.
func (w *writer) leanQuery(ctx context.Context, c *connstate.Stmts, sql string, args []any) (pgx.Rows, error) {
	ctx, end := w.traceQuery(ctx, sql, args)
	mrr, err := w.firstLean(ctx, c, sql, args)
	if err != nil {
		end(pgconn.CommandTag{}, err)
		return errs.NewRows(err), err
	}
	r := &firstRows{Rows: pgx.RowsFromResultReader(w.conn.TypeMap(), mrr.ResultReader()), conn: w.conn, end: end}
	r.close = func() error { return w.finishLean(c, mrr, sql, r.Rows.Err()) }
	return r, nil
}
