package txn

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// deferred is a statement fn sent without waiting for its result: it
// travels in the write of the next statement fn sends, or in COMMIT's.
type deferred struct {
	sql  string
	args []any
	// keep: its result is kept for a function to read after COMMIT
	// (a batch's queued query); res is that result.
	keep bool
	res  Result
}

// ErrDeferOption is the error of a deferred statement whose arguments
// start with one of pgx's per-query options: it has no write of its own
// to apply them to.
var ErrDeferOption = errors.New("a deferred statement takes no per-query option (exec mode, result formats): send it with Exec")

// CheckDeferArgs returns [ErrDeferOption] for arguments a deferred
// statement does not take.
func CheckDeferArgs(args []any) error {
	if hasQueryOption(args) {
		return ErrDeferOption
	}
	return nil
}

// Defer queues a statement whose result fn does not read: it is sent
// with the next statement fn sends, or with COMMIT, and its error, if
// any, ends the attempt ([Tx.DeferErr]). A query rewriter among args
// (pgx.NamedArgs) is applied now.
func (t *Tx) Defer(ctx context.Context, sql string, args []any) error {
	_, err := t.defer1(ctx, sql, args, false)
	return err
}

// DeferKept is [Tx.Defer] for a statement whose result is kept, for a
// function to read after COMMIT: the returned result is filled when the
// statement's answer arrives.
func (t *Tx) DeferKept(ctx context.Context, sql string, args []any) (*Result, error) {
	return t.defer1(ctx, sql, args, true)
}

func (t *Tx) defer1(ctx context.Context, sql string, args []any, keep bool) (*Result, error) {
	if t.closed.Load() {
		return nil, pgx.ErrTxClosed
	}
	if hasQueryOption(args) {
		return nil, ErrDeferOption
	}
	if len(args) > 0 {
		if qr, ok := args[0].(pgx.QueryRewriter); ok {
			var err error
			if sql, args, err = qr.RewriteQuery(ctx, t.w.conn, sql, args[1:]); err != nil {
				return nil, err
			}
		}
	}
	d := &deferred{sql: sql, args: args, keep: keep}
	t.w.track.scan(sql)
	t.w.deferred = append(t.w.deferred, d)
	return &d.res, nil
}

// RunningKey is the context key under which the context fn received
// finds fn's *Tx while fn runs, and a nil *Tx once it returned.
type RunningKey struct{}

// OnCommitted sets f to run once COMMIT of t's attempt succeeded, with
// the attempt's connection, still held.
func (t *Tx) OnCommitted(f func(conn *pgx.Conn)) { t.committed = f }

// Committed runs what [Tx.OnCommitted] set, once: COMMIT succeeded on
// conn.
func (t *Tx) Committed(conn *pgx.Conn) {
	if f := t.committed; f != nil {
		t.committed = nil
		f(conn)
	}
}

// DeferErr returns the error a deferred statement met: the attempt's
// failure, whatever fn made of it.
func (t *Tx) DeferErr() error { return t.w.deferErr }

// pending reports deferred statements not sent yet.
func (w *writer) pending() bool { return len(w.deferred) > 0 }

// queueDeferred moves the deferred statements into b, after BEGIN's, and
// returns them: [writer.send] reads their results.
func (w *writer) queueDeferred(b *pgx.Batch) []*deferred {
	ds := w.deferred
	w.deferred = nil
	for _, d := range ds {
		b.Queue(d.sql, d.args...)
	}
	return ds
}

// readDeferred reads the results of ds from br, telling the query tracer
// of each (ends, when traced), and returns the first error: it is the
// attempt's (deferErr), and the statements after it did not run.
func (w *writer) readDeferred(br pgx.BatchResults, ds []*deferred, ends []func(pgconn.CommandTag, error)) error {
	for i, d := range ds {
		var err error
		var tag pgconn.CommandTag
		if d.keep {
			err = d.res.read(br)
			tag = d.res.Tag
		} else {
			tag, err = br.Exec()
		}
		if i < len(ends) {
			ends[i](tag, err)
		}
		if err != nil {
			for _, end := range ends[min(i+1, len(ends)):] {
				end(pgconn.CommandTag{}, errNotRun)
			}
			w.deferErr = err
			return err
		}
	}
	return nil
}

// flushDeferred sends the deferred statements on their own, for what
// cannot carry them (a copy, a savepoint, the connection handed out, a
// statement sent after BEGIN, COMMIT where its write cannot), with the
// id read after them while the transaction is tracked.
func (w *writer) flushDeferred(ctx context.Context) error {
	if !w.pending() {
		return nil
	}
	if err := w.beginFirst(ctx); err != nil {
		return err
	}
	b, skip := w.beginBatch(ctx, len(w.deferred))
	ds := w.queueDeferred(b)
	w.queueID(b)
	br, err := w.send(ctx, b, skip, ds)
	if err != nil {
		return err
	}
	return br.Close()
}

// Result is a kept deferred statement's result, as it arrived: its rows
// in the wire's formats, and its command tag.
type Result struct {
	Fields []pgconn.FieldDescription
	Rows   [][][]byte
	Tag    pgconn.CommandTag
	Read   bool // the result arrived
}

// read reads the next result of br into r.
func (r *Result) read(br pgx.BatchResults) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	r.Fields = append([]pgconn.FieldDescription(nil), rows.FieldDescriptions()...)
	for rows.Next() {
		r.Rows = append(r.Rows, copyValues(rows.RawValues()))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	r.Tag, r.Read = rows.CommandTag(), true
	return nil
}

// readFrom reads rr, a result of COMMIT's write, into r.
func (r *Result) readFrom(rr *pgconn.ResultReader) error {
	r.Fields = append([]pgconn.FieldDescription(nil), rr.FieldDescriptions()...)
	for rr.NextRow() {
		r.Rows = append(r.Rows, copyValues(rr.Values()))
	}
	tag, err := rr.Close()
	if err != nil {
		return err
	}
	r.Tag, r.Read = tag, true
	return nil
}

func copyValues(vs [][]byte) [][]byte {
	out := make([][]byte, len(vs))
	for i, v := range vs {
		if v != nil {
			out[i] = append([]byte{}, v...)
		}
	}
	return out
}
