package txn

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/connstate"
)

// firstSimple runs fn's statement without arguments as pgx's Exec does,
// in the simple protocol (it may hold several statements), in one query
// after BEGIN when it is the first, with the id read after it.
func (t *Tx) firstSimple(ctx context.Context, sql string) (tag pgconn.CommandTag, err error) {
	ctx, end := t.traceQuery(ctx, sql, nil)
	defer func() { end(tag, err) }()
	first := !t.begun
	t.begun = true
	// One allocation: the query is built in a buffer on the stack.
	var buf [512]byte
	q := buf[:0]
	skip := 0
	if first {
		q = append(q, t.beginSQL...)
		skip = 1
		if ms, ok := statementTimeout(ctx, t.timeout, t.s.SessionTimeout); ok {
			q = append(q, "; set local statement_timeout = "...)
			q = strconv.AppendInt(q, ms, 10)
			skip = 2
		}
		// The newline ends a line comment fn's statement may end with.
		q = append(q, ";\n"...)
	}
	q = append(q, sql...)
	var c *connstate.Stmts
	if t.st != nil {
		c = &t.st.Stmts
	}
	if t.capture != captureNone {
		q = append(q, "\n;"...)
		if t.capture == captureID && c != nil && c.XidPrepared {
			q = append(q, executeXidSQLs[b2i(t.notify)]...)
		} else {
			q = append(q, t.idReadSQL()...)
		}
	}
	mrr := t.pgConn.Exec(ctx, string(q))
	done, idDone := 0, false
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		fields := rr.FieldDescriptions()
		isID := t.capture != captureNone && len(fields) > 0 && fields[0].Name == "pgtx_xid"
		var r idRow
		got := false
		for rr.NextRow() {
			if isID {
				if row, ok := parseIDRow(rr.Values()); ok {
					r, got = row, true
				}
			}
		}
		ct, rerr := rr.Close()
		if rerr != nil {
			break
		}
		done++
		if done <= skip {
			continue
		}
		idDone = isID && got
		if idDone {
			t.setID(r)
			continue
		}
		tag = ct
	}
	err = mrr.Close()
	if err != nil && c != nil {
		c.Invalidate("", err)
	}
	if done < skip {
		t.beginErr = err
		if err == nil {
			t.beginErr = errors.New("pgtx: BEGIN did not run")
		}
		return tag, t.beginErr
	}
	if !idDone && t.idRead {
		// fn's own statement returned the column name: it was not the id.
		t.idRead = false
	}
	return tag, err
}

// traceQuery reports fn's first statement to the connection's QueryTracer
// as pgx reports every statement, and returns the function that reports
// its end.
func (t *Tx) traceQuery(ctx context.Context, sql string, args []any) (context.Context, func(pgconn.CommandTag, error)) {
	var tr pgx.QueryTracer
	if t.st != nil {
		tr = t.st.Tracer
	}
	if tr == nil {
		return ctx, func(pgconn.CommandTag, error) {}
	}
	ctx = tr.TraceQueryStart(ctx, t.conn, pgx.TraceQueryStartData{SQL: sql, Args: args})
	return ctx, func(tag pgconn.CommandTag, err error) {
		tr.TraceQueryEnd(ctx, t.conn, pgx.TraceQueryEndData{CommandTag: tag, Err: err})
	}
}
