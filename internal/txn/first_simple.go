package txn

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// firstSimple runs fn's statement without arguments as pgx's Exec does,
// in the simple protocol (it may hold several statements), in one query
// after BEGIN when it is the first, with the id read after it. It spares
// the general path's pipeline (firstExec) on the commonest first write.
func (w *writer) firstSimple(ctx context.Context, sql string) (tag pgconn.CommandTag, err error) {
	ctx, end := w.traceQuery(ctx, sql, nil)
	defer func() { end(tag, err) }()
	first := !w.beginSent
	w.beginSent = true
	var buf [512]byte
	q := buf[:0]
	skip := 0
	if first {
		q = append(q, w.beginSQL...)
		skip = 1
		if ms, ok := statementTimeout(ctx, w.timeout, w.s.SessionTimeout); ok {
			q = append(q, "; set local statement_timeout = "...)
			q = strconv.AppendInt(q, ms, 10)
			skip = 2
		}
		// The newline ends a line comment fn's statement may end with.
		q = append(q, ";\n"...)
	}
	q = append(q, sql...)
	reads := w.track.reads()
	if reads {
		q = append(q, "\n;"...)
		q = append(q, w.track.simpleReadSQL(w.st)...)
	}
	mrr := w.pgConn.Exec(ctx, string(q))
	done, idDone := 0, false
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		fields := rr.FieldDescriptions()
		isID := reads && len(fields) > 0 && fields[0].Name == "pgtx_xid"
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
			w.track.set(r)
			continue
		}
		tag = ct
	}
	err = mrr.Close()
	if err != nil && w.st != nil {
		w.st.Forget(err)
	}
	if done < skip {
		w.beginErr = err
		if err == nil {
			w.beginErr = errors.New("pgtx: BEGIN did not run")
		}
		return tag, w.beginErr
	}
	if !idDone {
		// No id read answered (fn's own statement may have returned the
		// column name): the id was not read.
		w.track.unread()
	}
	return tag, err
}
