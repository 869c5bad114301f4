package txn

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The final write: deferred statements that are still pending at COMMIT
// travel with it, in one write: [BEGIN, deferred…, select id, Flush,
// COMMIT, Sync] for a transaction that sent nothing else, and [deferred…,
// select id, Flush, COMMIT, Sync] after its other statements. The id read
// goes when COMMIT's would (its Flush sends the id before COMMIT runs), or
// when the transaction began in this write. A deferred statement that
// fails skips COMMIT (up to Sync): nothing commits, and its error is the
// attempt's. An answer lost after the write left is a lost COMMIT answer
// like any other, resolved with what arrived of the id.

// finalOwnWrite reports that COMMIT's write can carry the deferred
// statements: not behind Pgpool-II, where BEGIN goes alone and COMMIT
// restores the session's timeout.
func (w *writer) finalOwnWrite() bool {
	return !w.pgpool && (w.st == nil || !w.st.RestoreTimeout)
}

// encoded is a deferred statement, ready to send: by name, or its text
// with its parameters' types.
type encoded struct {
	name             string
	oids             []uint32
	values           [][]byte
	formats, results []int16
}

// encodeDeferred encodes the deferred statements' arguments as pgx's exec
// mode would: with the statement's description in the modes that describe
// (described once per connection and text: one round trip; in the mode
// that prepares named statements, prepared under a name of pgtx's), by the
// arguments' Go types in the others, and for texts beyond the
// connection's [connstate.State.CanDescribe].
func (w *writer) encodeDeferred(ctx context.Context, ds []*deferred) ([]encoded, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	mode := w.conn.Config().DefaultQueryExecMode
	describe := w.st != nil && mode != pgx.QueryExecModeExec && mode != pgx.QueryExecModeSimpleProtocol
	out := make([]encoded, len(ds))
	var eqb pgx.ExtendedQueryBuilder
	for i, d := range ds {
		var sd *pgconn.StatementDescription
		if describe {
			var err error
			if sd, err = w.describe(ctx, d.sql, mode == pgx.QueryExecModeCacheStatement); err != nil {
				return nil, err
			}
		}
		if err := eqb.Build(w.conn.TypeMap(), sd, d.args); err != nil {
			return nil, fmt.Errorf("pgtx: deferred statement %q: %w", d.sql, err)
		}
		e := &out[i]
		if sd != nil {
			e.name, e.oids = sd.Name, sd.ParamOIDs
		}
		e.values = make([][]byte, len(eqb.ParamValues))
		for j, v := range eqb.ParamValues {
			if v != nil {
				e.values[j] = append([]byte{}, v...)
			}
		}
		e.formats = append([]int16(nil), eqb.ParamFormats...)
		e.results = append([]int16(nil), eqb.ResultFormats...)
	}
	return out, nil
}

// describe returns sql's description kept on the connection, or asks the
// server for it (one round trip), preparing it under a name of pgtx's when
// named; nil for a text beyond those the connection keeps.
func (w *writer) describe(ctx context.Context, sql string, named bool) (*pgconn.StatementDescription, error) {
	if sd := w.st.Described(sql); sd != nil {
		return sd, nil
	}
	if !w.st.CanDescribe() {
		return nil, nil
	}
	name := ""
	if named {
		name = w.st.DeferredName()
	}
	sd, err := w.pgConn.Prepare(ctx, name, sql, nil)
	if err != nil {
		return nil, err
	}
	w.st.Describe(sql, sd)
	return sd, nil
}

// commitWrite sends COMMIT's write, with the deferred statements still
// pending and the id read when readID ([select id, Flush, COMMIT, Sync]
// when none is pending), and returns COMMIT's tag, or the first error of
// the write. A failed id read skips COMMIT (up to Sync): the transaction
// stays open.
func (w *writer) commitWrite(ctx context.Context, readID bool) (pgconn.CommandTag, error) {
	ds := w.deferred
	w.deferred = nil
	enc, err := w.encodeDeferred(ctx, ds)
	if err != nil {
		w.deferErr = err
		return pgconn.CommandTag{}, err
	}
	ends := w.traceDeferred(ctx, ds)
	defer func() {
		for _, end := range ends {
			end(pgconn.CommandTag{}, errNotRun)
		}
	}()
	p := w.pgConn.StartPipeline(ctx)
	skip := 0
	if !w.beginSent {
		w.beginSent = true
		p.SendQueryParams(w.beginSQL, nil, nil, nil, nil)
		skip = 1
		if ms, ok := statementTimeout(ctx, w.timeout, w.s.SessionTimeout); ok {
			p.SendQueryParams(setTimeoutSQL, [][]byte{strconv.AppendInt(nil, ms, 10)}, nil, nil, nil)
			skip = 2
		}
	}
	for i, d := range ds {
		e := &enc[i]
		if e.name != "" {
			p.SendQueryPrepared(e.name, e.values, e.formats, e.results)
		} else {
			p.SendQueryParams(d.sql, e.values, e.oids, e.formats, e.results)
		}
	}
	if readID {
		w.track.unread()
		if name, ok := w.track.preparedRead(w.st); ok {
			// Prepared once per connection (PREPARE pgtx_xid): no parse
			// and plan per transaction.
			p.SendQueryPrepared(name, nil, nil, nil)
		} else {
			p.SendQueryParams(w.track.readSQL(), nil, nil, nil, nil)
		}
		p.SendFlushRequest()
	}
	p.SendQueryParams("commit", nil, nil, nil, nil)
	p.SendPipelineSync()
	if err := p.Flush(); err != nil {
		_ = p.Close()
		return pgconn.CommandTag{}, err
	}
	fail := func(err error) (pgconn.CommandTag, error) {
		if cerr := p.Close(); cerr != nil && !isPgError(err) {
			err = errors.Join(err, cerr)
		}
		return pgconn.CommandTag{}, err
	}
	for range skip {
		if _, err := nextResult(p, nil); err != nil {
			if isPgError(err) {
				w.beginErr = err
			}
			return fail(err)
		}
	}
	for _, d := range ds {
		var res *Result
		if d.keep {
			res = &d.res
		}
		tag, err := nextResult(p, res)
		if len(ends) > 0 {
			ends[0](tag, err)
			ends = ends[1:]
		}
		if err != nil {
			if isPgError(err) {
				w.deferErr = err
				if w.st != nil && stale(err) {
					w.st.ForgetDescribed()
				}
			}
			return fail(err)
		}
	}
	if readID {
		res, err := p.GetResults()
		if rr, ok := res.(*pgconn.ResultReader); ok && err == nil {
			err = w.track.readID(rr)
		}
		if err != nil {
			return fail(err)
		}
	}
	tag, err := nextResult(p, nil)
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// nextResult reads the pipeline's next result, into res when it is kept,
// and returns its tag.
func nextResult(p *pgconn.Pipeline, res *Result) (pgconn.CommandTag, error) {
	r, err := p.GetResults()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	rr, ok := r.(*pgconn.ResultReader)
	if !ok {
		return pgconn.CommandTag{}, fmt.Errorf("pgtx: unexpected %T in COMMIT's write", r)
	}
	if res != nil {
		err := res.readFrom(rr)
		return res.Tag, err
	}
	return rr.Close()
}

// stale reports an error that says a description kept for a deferred
// statement no longer holds: its prepared statement is gone (26000, after
// a DEALLOCATE ALL or DISCARD ALL), or the schema changed under it (0A000,
// cached plan must not change result type; 42804, a parameter's type).
func stale(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "26000", "0A000", "42804":
		return true
	}
	return false
}

// errNotRun is what the query tracer is told of a deferred statement that
// did not run: one before it failed, or the write's answer was lost.
var errNotRun = errors.New("pgtx: the deferred statement did not run")

// traceDeferred reports the deferred statements that go in COMMIT's write
// to the connection's QueryTracer, as pgx reports every statement, and
// returns the functions that report their ends, in order (none without a
// tracer).
func (w *writer) traceDeferred(ctx context.Context, ds []*deferred) []func(pgconn.CommandTag, error) {
	if len(ds) == 0 || w.st == nil || w.st.Tracer == nil {
		return nil
	}
	ends := make([]func(pgconn.CommandTag, error), len(ds))
	for i, d := range ds {
		_, ends[i] = w.traceQuery(ctx, d.sql, d.args)
	}
	return ends
}
