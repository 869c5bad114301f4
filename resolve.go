package pgtx

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultResolveTimeout bounds the resolution of an ambiguous COMMIT.
const DefaultResolveTimeout = 5 * time.Second

// resolvePoll is the pause between two questions about a transaction still
// in progress.
const resolvePoll = 20 * time.Millisecond

// xidSQL asks for the transaction's id without assigning one: NULL when the
// transaction wrote nothing.
const xidSQL = "select pg_current_xact_id_if_assigned()::text"

// statusSQL asks what became of a transaction (PostgreSQL 13+).
const statusSQL = "select pg_xact_status($1::xid8)"

// ResolveStats counts the resolutions of ambiguous COMMITs (Config.ResolveCommits).
type ResolveStats struct {
	// Committed: the server had committed; the call reported success.
	Committed int64
	// Aborted: the server had not committed; the call was run again.
	Aborted int64
	// NotApplied: the transaction wrote nothing (no transaction id), so
	// running it again is harmless; the call was run again.
	NotApplied int64
	// Unknown: the id never arrived, the server could not be asked, or it no
	// longer knew; the call returned ErrCommitUnknown.
	Unknown int64
}

type resolveCounters struct{ committed, aborted, notApplied, unknown atomic.Int64 }

func (r *resolveCounters) snapshot() ResolveStats {
	return ResolveStats{Committed: r.committed.Load(), Aborted: r.aborted.Load(), NotApplied: r.notApplied.Load(), Unknown: r.unknown.Load()}
}

// commitResolving commits with the transaction id captured in the same round
// trip: "select pg_current_xact_id_if_assigned()", a Flush (so the server
// sends the id before it runs COMMIT), then COMMIT and Sync, all in one
// write. When the connection is lost during COMMIT, the id lets a fresh
// connection ask the server what happened.
func (a *txAttempt) commitResolving(ctx context.Context, pgConn *pgconn.PgConn, nc net.Conn) (Class, error) {
	_ = nc.SetDeadline(time.Now().Add(a.pool.settings.commitTimeout))
	r := sendCommitWithXID(uncancellable(ctx), pgConn)
	_ = nc.SetDeadline(time.Time{})

	switch {
	case r.err == nil && r.tag.String() == "COMMIT":
		return ClassNone, nil
	case r.err == nil:
		return ClassPermanent, pgx.ErrTxCommitRollback // the transaction had failed inside fn
	case r.stage == stageXID:
		var pgErr *pgconn.PgError
		if errors.As(r.err, &pgErr) && endedIdle(pgErr) {
			// The session had ended while idle: COMMIT never ran.
			return Classify(r.err), r.err
		}
		if errors.As(r.err, &pgErr) && !endsSession(pgErr) {
			// The transaction had failed inside fn (25P02): roll it back.
			rollbackAborted(ctx, pgConn, nc, a.pool.settings.rollbackTimeout)
			return ClassPermanent, pgx.ErrTxCommitRollback
		}
		a.pool.resolved.unknown.Add(1)
		return ClassAmbiguous, &commitUnknownError{err: r.err}
	}
	var pgErr *pgconn.PgError
	if errors.As(r.err, &pgErr) && !endsSession(pgErr) {
		return Classify(r.err), r.err // definitive: not committed
	}
	if !r.hasXID {
		// The transaction wrote nothing: whether or not COMMIT ran, running
		// it again changes nothing twice.
		a.pool.resolved.notApplied.Add(1)
		return ClassConnectionLost, r.err
	}
	return a.pool.resolve(ctx, r.xid, r.err)
}

// commitStage is how far a resolving commit got.
type commitStage int

const (
	stageXID    commitStage = iota // the transaction id was not read
	stageCommit                    // the id was read; COMMIT's answer was not
)

type commitResult struct {
	stage  commitStage
	xid    string
	hasXID bool
	tag    pgconn.CommandTag
	err    error
}

// sendCommitWithXID pipelines the id query, a Flush, COMMIT and Sync.
func sendCommitWithXID(ctx context.Context, pgConn *pgconn.PgConn) (r commitResult) {
	p := pgConn.StartPipeline(ctx)
	p.SendQueryParams(xidSQL, nil, nil, nil, nil)
	p.SendFlushRequest()
	p.SendQueryParams("commit", nil, nil, nil, nil)
	p.SendPipelineSync()
	defer func() {
		if err := p.Close(); err != nil && r.err == nil {
			r.err = err
		}
	}()
	if r.err = p.Flush(); r.err != nil {
		return r
	}
	res, err := p.GetResults()
	if r.err = err; err != nil {
		return r
	}
	if rr, ok := res.(*pgconn.ResultReader); ok {
		for rr.NextRow() {
			if v := rr.Values(); len(v) == 1 && v[0] != nil {
				r.xid, r.hasXID = string(v[0]), true
			}
		}
		if _, r.err = rr.Close(); r.err != nil {
			return r
		}
	}
	r.stage = stageCommit
	res, err = p.GetResults()
	if r.err = err; err != nil {
		return r
	}
	if rr, ok := res.(*pgconn.ResultReader); ok {
		r.tag, r.err = rr.Close()
	}
	return r
}

// rollbackAborted ends a transaction block left in the failed state.
func rollbackAborted(ctx context.Context, pgConn *pgconn.PgConn, nc net.Conn, timeout time.Duration) {
	_ = nc.SetDeadline(time.Now().Add(timeout))
	_ = pgConn.Exec(uncancellable(ctx), "rollback").Close()
	_ = nc.SetDeadline(time.Time{})
}

// resolve asks, on a fresh connection, what became of transaction xid whose
// COMMIT lost its connection (lost is that error): committed → success;
// aborted → run it again; in progress → ask again shortly; anything else →
// ErrCommitUnknown. It runs on a context the caller's cancellation cannot
// interrupt, bounded by ResolveTimeout.
func (p *Pool) resolve(ctx context.Context, xid string, lost error) (Class, error) {
	rctx, cancel := context.WithTimeout(uncancellable(ctx), p.settings.resolveTimeout)
	defer cancel()
	for {
		var status *string
		err := p.Pool.QueryRow(rctx, statusSQL, pgx.QueryExecModeExec, xid).Scan(&status)
		switch {
		case err != nil || status == nil:
			// Unreachable, or the id is too old to know: the outcome stays
			// unknown.
			p.resolved.unknown.Add(1)
			return ClassAmbiguous, &commitUnknownError{err: errors.Join(lost, err)}
		case *status == "committed":
			p.resolved.committed.Add(1)
			return ClassNone, nil
		case *status == "aborted":
			p.resolved.aborted.Add(1)
			return ClassConnectionLost, lost
		}
		if p.clock.Sleep(rctx, resolvePoll) != nil { // in progress: the backend is still finishing
			p.resolved.unknown.Add(1)
			return ClassAmbiguous, &commitUnknownError{err: lost}
		}
	}
}
