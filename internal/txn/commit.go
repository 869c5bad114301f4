package txn

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/errs"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// The commit path: one COMMIT for every attempt, and what its answer means.
//
// A transaction whose id its statements read (the one that gave it one),
// or that provably has none (every statement read it, and it was NULL),
// sends a bare COMMIT: one round trip. Otherwise (statements pgtx did not
// see, a notification) COMMIT's write reads the id first and asks the
// server to flush it (a protocol Flush), so that it arrives before COMMIT
// runs: [select id, Flush, COMMIT, Sync]. A notification takes its id only
// at COMMIT, so a transaction that may have sent one reads its id with one
// assigned.

// Releaser gives an attempt's connection back to its pool.
type Releaser interface{ Release() }

// commit is [Commit]: it ends the transaction with COMMIT, on a context
// the caller's cancellation cannot interrupt, bounded by CommitTimeout, and
// resolves an answer that was lost, after giving the dead connection back
// with r (nil: none).
func (w *writer) commit(ctx context.Context, r Releaser) (classify.Class, error) {
	x := &w.track
	if !w.beginSent && !w.pending() {
		return classify.None, nil // fn sent nothing: there is nothing to commit
	}
	if w.pending() && !w.finalOwnWrite() {
		if err := w.flushDeferred(ctx); err != nil {
			w.rollback(ctx)
			return classify.Err(err), err
		}
	}
	final := w.pending()
	for range w.deferred {
		x.after() // sent without the id read after it
	}
	pgConn := w.pgConn
	status := pgConn.TxStatus()
	send := x.plan(w.beginSent || final, status, x.resolvedWith() == InRecovery && status != 'E' && resolve.StillInRecovery(pgConn))
	if send == sendRollback {
		w.deferred = nil
	}
	if send == sendRollback {
		// A statement failed inside fn, which swallowed the error: COMMIT
		// would only answer ROLLBACK.
		w.rollback(ctx)
		return classify.Permanent, pgx.ErrTxCommitRollback
	}
	// A transaction that provably wrote nothing changes nothing at
	// COMMIT: its COMMIT keeps the caller's deadline, as any statement
	// does, instead of running on past it (a slow server, a partition).
	changesNothing := send == sendCommitKeepingDeadline
	cctx := uncancellable(ctx)
	if changesNothing {
		cctx = ctx
	}
	nc := pgConn.Conn()
	_ = nc.SetDeadline(deadlineAfter(w.s.CommitTimeout))
	var tag pgconn.CommandTag
	var err error
	switch {
	case final || send == sendCommitReadingID:
		tag, err = w.commitWrite(cctx, send == sendCommitReadingID || !w.beginSent && x.reads())
	default:
		tag, err = endTransaction(cctx, pgConn, "commit")
	}
	_ = nc.SetDeadline(time.Time{})
	if changesNothing && err != nil && ctx.Err() != nil {
		// Cut by the caller's context: committed or not, nothing
		// changed.
		w.rollback(ctx)
		return classify.Timeout, errs.WithContext(ctx, err)
	}
	c, err := commitOutcome(tag, err, pgConn.IsClosed())
	if c != classify.Ambiguous {
		if c != classify.None {
			w.rollback(ctx) // a failed id read leaves the transaction open
		}
		return c, err
	}
	cu := err.(*errs.CommitUnknownError)
	lost := x.lost()
	if r != nil && (lost == lostAskBackend || lost == lostResolve) {
		r.Release() // the connection is dead: COMMIT lost its answer with it
	}
	switch lost {
	case lostUnknown:
		return c, err
	case lostNotResolvable:
		return notResolvable(w.s, pgConn, x.resolvedWith(), cu)
	case lostAskBackend:
		// COMMIT's write left, its id did not arrive. A backend that
		// still runs the transaction tells its id; once COMMIT has ended
		// it, nothing can.
		if xid, ok := w.backendXid(ctx); ok {
			x.found(xid)
			return resolveID(ctx, w.s, x.current(), cu.Err)
		}
		w.s.Counters.CountUnknown(resolve.Unanswered)
		cu.Why = "the connection was lost before the transaction's id arrived, and its backend no longer ran it"
		return c, cu
	case lostNotApplied:
		// The transaction had no id when COMMIT was sent: it wrote
		// nothing, and sent no notification (whose id is read assigned).
		// Its COMMIT changed nothing; running it again is harmless.
		w.s.Counters.NotApplied.Add(1)
		return classify.ConnectionLost, cu.Err
	}
	return resolveID(ctx, w.s, x.current(), cu.Err)
}

// commitOutcome classifies COMMIT's answer (tag) or error: COMMIT → none;
// ROLLBACK (the transaction had failed inside fn, an error fn swallowed) →
// permanent; a server error that leaves the session alive (closed: the
// connection closed after the answer) → its class (the transaction did not
// commit; 40001 at COMMIT is a conflict); anything else → ambiguous, a
// *errs.CommitUnknownError.
//
// pgconn.SafeToRetry is not trusted here: pgx can report a COMMIT that
// reached a dead connection as pgconn.ErrConnClosed. Any failure without a
// server answer is ambiguous, and so is an answer that ended the session: a
// FATAL during COMMIT (57P01 while waiting for synchronous replication, a
// pooler killing the server connection) may come after the commit record
// was written.
func commitOutcome(tag pgconn.CommandTag, err error, closed bool) (classify.Class, error) {
	switch {
	case err == nil && tag.String() == "COMMIT":
		return classify.None, nil
	case err == nil:
		return classify.Permanent, pgx.ErrTxCommitRollback
	case notCommitted(err, closed):
		return classify.Err(err), err
	}
	return classify.Ambiguous, &errs.CommitUnknownError{Err: err}
}

// isPgError reports a server error.
func isPgError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// notCommitted reports a COMMIT error that is definitive: a server error
// that leaves the session alive (the transaction did not commit; 40001 at
// COMMIT is a conflict), or a session ended while it idled before COMMIT,
// which then never ran. An ERROR after which the connection closed
// (closed) is not: Pgpool-II ends the session after an error of its own,
// which may come after it forwarded COMMIT.
func notCommitted(err error, closed bool) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && ((!classify.EndsSession(pgErr) && !closed) || classify.EndedIdle(pgErr))
}

// rollback is [Rollback]: it ends the transaction when BEGIN was sent and
// it is open, bounded by RollbackTimeout.
func (w *writer) rollback(ctx context.Context) {
	if !w.beginSent {
		return
	}
	rollbackConn(ctx, w.pgConn, w.s.RollbackTimeout)
}

// rollbackConn rolls back the transaction open on pgConn, if any.
func rollbackConn(ctx context.Context, pgConn *pgconn.PgConn, timeout time.Duration) {
	if pgConn.IsClosed() || pgConn.IsBusy() || pgConn.TxStatus() == 'I' {
		return
	}
	nc := pgConn.Conn()
	_ = nc.SetDeadline(deadlineAfter(timeout))
	_, _ = endTransaction(uncancellable(ctx), pgConn, "rollback")
	_ = nc.SetDeadline(time.Time{})
}

// execTag runs one simple-protocol statement and returns its command tag.
func execTag(ctx context.Context, pgConn *pgconn.PgConn, sql string) (tag pgconn.CommandTag, err error) {
	mrr := pgConn.Exec(ctx, sql)
	for mrr.NextResult() {
		tag, _ = mrr.ResultReader().Close()
	}
	return tag, mrr.Close()
}
