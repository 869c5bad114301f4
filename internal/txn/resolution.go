package txn

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/errs"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// resolveID asks the server, on a connection the main pool's exhaustion
// cannot block, what became of transaction id whose COMMIT lost its answer
// (lost is that error), within ResolveTimeout while servers answer and
// UnavailableTimeout while none can be reached, on a context the caller's
// cancellation cannot interrupt (see [resolve.Resolve]): committed →
// success; aborted → run it again; nothing can tell → ErrCommitUnknown.
func resolveID(ctx context.Context, s *Settings, id resolve.ID, lost error) (classify.Class, error) {
	rctx, cancel := context.WithTimeout(uncancellable(ctx), s.ResolveTimeout+s.UnavailableTimeout)
	defer cancel()
	r := resolve.Resolve(rctx, s.Resolver, s.Clock, s.Counters, id, s.ResolveTimeout, s.UnavailableTimeout)
	switch {
	case r.Status == resolve.Committed:
		return classify.None, nil
	case r.Status == resolve.Aborted:
		return classify.ConnectionLost, lost
	case r.Unanswered:
		return classify.Ambiguous, &errs.CommitUnknownError{Err: errors.Join(lost, r.Err), Why: r.Why}
	}
	return classify.Ambiguous, &errs.CommitUnknownError{Err: lost, Why: r.Why}
}

// notResolvable is the outcome of a lost COMMIT that cannot be asked about
// (cu is its ErrCommitUnknown): that error, or, for a transaction that
// began on a hot standby (where it could change nothing), a rerun.
func notResolvable(s *Settings, pgConn *pgconn.PgConn, kind Kind, cu *errs.CommitUnknownError) (classify.Class, error) {
	switch kind {
	case Balanced:
		// Read-only: its COMMIT changed nothing; running it again is
		// harmless.
		s.Counters.NotApplied.Add(1)
		return classify.ConnectionLost, cu.Err
	case InRecovery:
		if resolve.StillInRecovery(pgConn) {
			s.Counters.NotApplied.Add(1)
			return classify.ConnectionLost, cu.Err
		}
		cu.Why = "the transaction began on a standby that was promoted while it ran"
	case OnPromoted:
		cu.Why = "the connection was made to a standby since promoted: the server's run was not captured"
	default:
		cu.Why = "the server cannot be asked: resolution needs pg_xact_status (PostgreSQL 13 or later)"
	}
	s.Counters.CountUnknown(resolve.Unsupported)
	return classify.Ambiguous, cu
}

// backendXid finds the id of the transaction from its backend, on a
// connection that reaches its backend directly, within half the
// ResolveTimeout.
func (w *writer) backendXid(ctx context.Context) (uint64, bool) {
	if !w.track.direct() || w.st == nil || w.st.Res.BackendStart == 0 {
		return 0, false
	}
	s := w.s
	bctx, cancel := context.WithTimeout(uncancellable(ctx), s.ResolveTimeout/2)
	defer cancel()
	return s.Resolver.BackendXid(bctx, w.pgConn.PID(), w.st.Res.BackendStart, func(ctx context.Context) error {
		return s.Clock.Sleep(ctx, resolve.Poll)
	})
}
