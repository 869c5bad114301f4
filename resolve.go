package pgtx

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// defaultResolveTimeout bounds the resolution of an ambiguous COMMIT.
const defaultResolveTimeout = 5 * time.Second

// ResolveStats counts what became of the ambiguous COMMITs of a pool: those
// whose connection was lost, or whose session ended, while COMMIT was in
// flight ([Config].ResolveTimeout).
type ResolveStats struct {
	// CommittedCount: the server had committed; the call reported success.
	CommittedCount int64
	// AbortedCount: the server had not committed; the call was run again.
	AbortedCount int64
	// NotAppliedCount: the transaction had no id when COMMIT was sent (it
	// wrote nothing and sent no notification), or it began on a server in
	// recovery (a hot standby), where a transaction can change nothing, so
	// running it again is harmless; the call was run again.
	NotAppliedCount int64
	// LostCount counts, of AbortedCount, the transactions whose server
	// had restarted, recovered from a crash or been promoted since they
	// began, and whose id was provably not in the history it kept: its
	// WAL never had their commit.
	LostCount int64
	// UnknownCount: nothing could tell; the call returned
	// [ErrCommitUnknown]. It is the sum of the five counts of reasons
	// that follow, and the error says which.
	UnknownCount int64
	// UnsupportedCount counts the unknown outcomes of connections to
	// servers that cannot be asked (without pg_xact_status: PostgreSQL
	// before 13, CockroachDB, YugabyteDB).
	UnsupportedCount int64
	// ElsewhereCount counts the unknown outcomes whose server, when it
	// could be asked, was not the system or timeline the transaction ran
	// on: another system, an older timeline, or a standby promoted since
	// (a failover) that said "committed" with nothing to prove that the
	// id had not been given again there to another transaction.
	ElsewhereCount int64
	// RestartedCount counts the unknown outcomes whose server, on the
	// transaction's timeline, said "committed" after it had restarted or
	// recovered from a crash since the transaction began, with nothing to
	// prove that the id had not been given again to another transaction.
	RestartedCount int64
	// ForgottenCount counts the unknown outcomes whose server no longer
	// knew the id (too old).
	ForgottenCount int64
	// UnansweredCount counts the unknown outcomes with no answer within
	// ResolveTimeout: no server of the transaction's system out of
	// recovery could be reached.
	UnansweredCount int64
	// TerminatedCount counts backends ended to resolve a transaction they
	// still held open (their client gone, they had not noticed), after
	// which the server's answer was definitive.
	TerminatedCount int64
}

type resolveCounters struct {
	committed, aborted, lost, notApplied, terminated                  atomic.Int64
	unknown, unsupported, elsewhere, restarted, forgotten, unanswered atomic.Int64
}

func (r *resolveCounters) snapshot() ResolveStats {
	return ResolveStats{
		CommittedCount: r.committed.Load(), AbortedCount: r.aborted.Load(), LostCount: r.lost.Load(),
		NotAppliedCount: r.notApplied.Load(), UnknownCount: r.unknown.Load(),
		UnsupportedCount: r.unsupported.Load(), ElsewhereCount: r.elsewhere.Load(), RestartedCount: r.restarted.Load(),
		ForgottenCount: r.forgotten.Load(), UnansweredCount: r.unanswered.Load(),
		TerminatedCount: r.terminated.Load(),
	}
}

// countUnknown counts an unknown outcome and its reason.
func (r *resolveCounters) countUnknown(why unknownReason) {
	r.unknown.Add(1)
	switch why {
	case reasonUnsupported:
		r.unsupported.Add(1)
	case reasonElsewhere:
		r.elsewhere.Add(1)
	case reasonRestarted:
		r.restarted.Add(1)
	case reasonForgotten:
		r.forgotten.Add(1)
	default:
		r.unanswered.Add(1)
	}
}

// parseRun parses the columns of runSQL, as text.
func parseRun(v [][]byte) (run serverRun, flushed int64) {
	tl, _ := strconv.ParseInt(string(v[0]), 10, 32)
	run.timeline = int32(tl)
	run.start, _ = strconv.ParseInt(string(v[1]), 10, 64)
	run.epoch, _ = strconv.ParseInt(string(v[2]), 10, 64)
	flushed, _ = strconv.ParseInt(string(v[3]), 10, 64)
	return run, flushed
}

// parseUint parses a decimal text value without allocating.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// errNotSynced is a question's error when the server says the transaction
// committed and its synchronous standbys have not acknowledged it yet.
var errNotSynced = errors.New("pgtx: the transaction committed on the server, and its synchronous standbys had not acknowledged it")

// resolvePoll is the pause between two questions about a transaction.
const resolvePoll = 10 * time.Millisecond

// lingerAfter is how long a backend must be seen idle in the transaction,
// receiving nothing, before resolution ends it: a COMMIT that reached its
// socket would have been read within microseconds, so after this long the
// backend is waiting for a client that is gone.
const lingerAfter = 50 * time.Millisecond

// resolve asks the server, on a connection the main pool's exhaustion
// cannot block, what became of transaction id whose COMMIT lost its answer
// (lost is that error): committed → success; aborted → run it again; still
// in progress → wait, and end the backend that holds it (it is provably
// ours: it runs our transaction id) once it has stayed idle in the
// transaction for lingerAfter (its client is gone, COMMIT never reached
// it), or stayed in progress for half the ResolveTimeout; then ask again.
// Another system or timeline, a server that no longer knows, or no answer
// within ResolveTimeout → ErrCommitUnknown. It runs on a context the
// caller's cancellation cannot interrupt.
func (p *Pool) resolve(ctx context.Context, id txID, lost error) (Class, error) {
	rctx, cancel := context.WithTimeout(uncancellable(ctx), p.settings.resolveTimeout)
	defer cancel()
	var (
		last      error
		end       = keepBackend
		idleSince int64     // the backend's last state change, while idle in the transaction
		idleSeen  time.Time // when it was first seen idle since idleSince
		busySeen  time.Time // when the transaction was first seen in progress
		standby   bool      // a server that answered was in recovery
		unsynced  bool      // a server said committed, its synchronous standbys had not acknowledged it
	)
	for {
		a := p.resolver.ask(rctx, id, end, idleSince)
		if a.terminated {
			p.resolved.terminated.Add(1)
		}
		j := judgement{status: statusUnreachable}
		if a.err == nil {
			j = judge(id, a.view)
		}
		if j.status == statusCommitted && !a.synced {
			// Committed on the server, not yet on its synchronous
			// standbys: ask again.
			j = judgement{status: statusUnreachable}
			a.err, unsynced = errNotSynced, true
		}
		end = keepBackend
		switch j.status {
		case statusCommitted:
			p.resolved.committed.Add(1)
			return classNone, nil
		case statusAborted:
			p.resolved.aborted.Add(1)
			if j.lost {
				p.resolved.lost.Add(1)
			}
			return ClassConnectionLost, lost
		case statusUnknown:
			p.resolved.countUnknown(j.reason)
			return ClassAmbiguous, &commitUnknownError{err: lost, why: j.why}
		case statusUnreachable:
			if a.err != nil {
				last = a.err
			} else {
				standby = true
			}
		case statusInProgress:
			if !j.sameRun {
				// Not provably this transaction's backend: wait, end none.
				break
			}
			now := p.clock.Now()
			if busySeen.IsZero() {
				busySeen = now
			}
			switch {
			case !strings.HasPrefix(a.state, "idle in transaction"):
				idleSince, idleSeen = 0, time.Time{}
			case a.changed != idleSince || idleSeen.IsZero():
				idleSince, idleSeen = a.changed, now
			}
			switch {
			case now.Sub(busySeen) >= p.settings.resolveTimeout/2:
				end = endBackend
			case !idleSeen.IsZero() && now.Sub(idleSeen) >= lingerAfter:
				end = endIfStillIdle
			}
		}
		if p.clock.Sleep(rctx, resolvePoll) != nil {
			p.resolved.countUnknown(reasonUnanswered)
			why := "no answer within ResolveTimeout " + p.settings.resolveTimeout.String()
			switch {
			case j.status == statusInProgress:
				why = "the transaction was still in progress after ResolveTimeout " + p.settings.resolveTimeout.String()
			case unsynced:
				why += "; the server said committed, and its synchronous standbys had not acknowledged it"
			case standby:
				// A standby's answer may lag the primary's: never used.
				why += "; a server that answered was in recovery"
			}
			return ClassAmbiguous, &commitUnknownError{err: errors.Join(lost, last), why: why}
		}
	}
}

// notResolvable is the outcome of a lost COMMIT that cannot be asked about
// (unknown is its ErrCommitUnknown): that error, or, for a transaction that
// began on a hot standby (where it could change nothing), a rerun.
func (p *Pool) notResolvable(pgConn *pgconn.PgConn, began beginKind, unknown error) (Class, error) {
	var cu *commitUnknownError
	if !errors.As(unknown, &cu) {
		return ClassAmbiguous, unknown
	}
	switch began {
	case beganInRecovery:
		if stillInRecovery(pgConn) {
			p.resolved.notApplied.Add(1)
			return ClassConnectionLost, cu.err
		}
		cu.why = "the transaction began on a standby that was promoted while it ran"
	case beganOnPromoted:
		cu.why = "the connection was made to a standby since promoted: the server's run was not captured"
	default:
		cu.why = "the server cannot be asked: resolution needs pg_xact_status (PostgreSQL 13 or later)"
	}
	p.resolved.countUnknown(reasonUnsupported)
	return ClassAmbiguous, cu
}

// xidText renders an id as PostgreSQL's text for xid8.
func xidText(xid uint64) string { return strconv.FormatUint(xid, 10) }
