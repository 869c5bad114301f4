package pgtx

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// defaultResolveTimeout bounds the resolution of an ambiguous COMMIT.
const defaultResolveTimeout = 5 * time.Second

// captureSQL ends the BEGIN round trip of a resolving transaction: it gives
// the transaction its id now (so even one that writes no row, sends only a
// notification or takes sequence values without logging them has one to ask
// about). The id is known before COMMIT
// leaves the client: a connection lost before this answer arrived never
// carried COMMIT.
const captureSQL = "; select pg_current_xact_id()"

// ResolveStats counts what became of the ambiguous COMMITs of a pool: those
// whose connection was lost, or whose session ended, while COMMIT was in
// flight ([Config].ResolveTimeout).
type ResolveStats struct {
	// CommittedCount: the server had committed; the call reported success.
	CommittedCount int64
	// AbortedCount: the server had not committed; the call was run again.
	AbortedCount int64
	// NotAppliedCount: the transaction began on a server in recovery (a
	// hot standby), where a transaction can change nothing, so running it
	// again is harmless; the call was run again.
	NotAppliedCount int64
	// UnknownCount: nothing could tell; the call returned
	// [ErrCommitUnknown]. UnsupportedCount and ElsewhereCount count two of
	// the reasons.
	UnknownCount int64
	// UnsupportedCount counts the unknown outcomes of connections to
	// servers that cannot be asked (without pg_xact_status: PostgreSQL
	// before 13, CockroachDB, YugabyteDB).
	UnsupportedCount int64
	// ElsewhereCount counts the unknown outcomes whose server, when it
	// could be asked, was not the system or timeline the transaction ran on
	// (a failover): an id of the old timeline may have been given to
	// another transaction there.
	ElsewhereCount int64
	// TerminatedCount counts backends ended to resolve a transaction they
	// still held open (their client gone, they had not noticed), after
	// which the server's answer was definitive.
	TerminatedCount int64
}

type resolveCounters struct {
	committed, aborted, notApplied, unknown, unsupported, elsewhere, terminated atomic.Int64
}

func (r *resolveCounters) snapshot() ResolveStats {
	return ResolveStats{
		CommittedCount: r.committed.Load(), AbortedCount: r.aborted.Load(), NotAppliedCount: r.notApplied.Load(),
		UnknownCount: r.unknown.Load(), UnsupportedCount: r.unsupported.Load(), ElsewhereCount: r.elsewhere.Load(),
		TerminatedCount: r.terminated.Load(),
	}
}

// txID names a transaction for its resolution: its id, and the system and
// timeline of the server it ran on. The id also finds the backend that runs
// it, while it runs: behind a pooler the connection's pid is not the
// backend's.
type txID struct {
	xid      uint64
	system   int64
	timeline int32
}

// beginCapturing runs sql (BEGIN and its settings, then captureSQL) in one
// round trip and returns the captured id. On an error the transaction may be
// open (a statement after BEGIN failed): the caller rolls it back.
func beginCapturing(ctx context.Context, pgConn *pgconn.PgConn, sql string) (xid uint64, err error) {
	mrr := pgConn.Exec(ctx, sql)
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		for rr.NextRow() {
			if v := rr.Values(); len(v) == 1 {
				xid, _ = parseUint(v[0])
			}
		}
		_, _ = rr.Close()
	}
	if err = mrr.Close(); err == nil && xid == 0 {
		err = errors.New("pgtx: BEGIN did not return the transaction id")
	}
	return xid, err
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

// commitCaptured sends COMMIT for a transaction whose id is known, on a
// context the caller's cancellation cannot interrupt, bounded by
// CommitTimeout (a deadline on the socket nc), and resolves it when its
// answer is lost.
func (a *txAttempt) commitCaptured(ctx context.Context, pgConn *pgconn.PgConn, nc net.Conn, id txID) (Class, error) {
	_ = nc.SetDeadline(deadlineAfter(a.pool.settings.commitTimeout))
	tag, err := execTag(uncancellable(ctx), pgConn, "commit")
	_ = nc.SetDeadline(time.Time{})
	switch {
	case err == nil && tag.String() == "COMMIT":
		return ClassNone, nil
	case err == nil:
		// ROLLBACK: the transaction had failed inside fn (an error fn
		// swallowed). Definitive, and not retried.
		return ClassPermanent, pgx.ErrTxCommitRollback
	}
	if notCommitted(err) {
		return Classify(err), err
	}
	return a.pool.resolve(ctx, id, err)
}

// execTag runs one simple-protocol statement and returns its command tag.
func execTag(ctx context.Context, pgConn *pgconn.PgConn, sql string) (tag pgconn.CommandTag, err error) {
	mrr := pgConn.Exec(ctx, sql)
	for mrr.NextResult() {
		tag, _ = mrr.ResultReader().Close()
	}
	return tag, mrr.Close()
}

// rollbackConn ends the transaction on pgConn without pgx's transaction
// handle (which a resolving pool keeps open for every transaction of the
// connection). A connection left in a transaction is discarded by Release.
func rollbackConn(ctx context.Context, pgConn *pgconn.PgConn, timeout time.Duration) {
	if pgConn.IsClosed() || pgConn.TxStatus() == 'I' {
		return
	}
	nc := pgConn.Conn()
	_ = nc.SetDeadline(deadlineAfter(timeout))
	_, _ = execTag(uncancellable(ctx), pgConn, "rollback")
	_ = nc.SetDeadline(time.Time{})
}

// The outcomes of a question about a transaction.
type xactStatus int

const (
	statusUnreachable xactStatus = iota // no answer: ask again
	statusCommitted
	statusAborted
	statusInProgress
	statusElsewhere // another system or timeline: it cannot know
	statusForgotten // too old for the server to know, or not yet given
)

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
	)
	for {
		a := p.resolver.ask(rctx, id, end, idleSince)
		if a.terminated {
			p.resolved.terminated.Add(1)
		}
		switch a.status {
		case statusCommitted:
			p.resolved.committed.Add(1)
			return ClassNone, nil
		case statusAborted:
			p.resolved.aborted.Add(1)
			return ClassConnectionLost, lost
		case statusElsewhere:
			p.resolved.unknown.Add(1)
			p.resolved.elsewhere.Add(1)
			return ClassAmbiguous, &commitUnknownError{err: lost}
		case statusForgotten:
			p.resolved.unknown.Add(1)
			return ClassAmbiguous, &commitUnknownError{err: errors.Join(lost, a.err)}
		case statusInProgress:
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
			default:
				end = keepBackend
			}
		}
		if a.err != nil {
			last = a.err
		}
		if p.clock.Sleep(rctx, resolvePoll) != nil {
			p.resolved.unknown.Add(1)
			return ClassAmbiguous, &commitUnknownError{err: errors.Join(lost, last)}
		}
	}
}

// notResolvable is the outcome of a lost COMMIT that cannot be asked about
// (unknown is its ErrCommitUnknown): that error, or, for a transaction that
// began on a hot standby (where it could change nothing), a rerun.
func (p *Pool) notResolvable(pgConn *pgconn.PgConn, began beginKind, unknown error) (Class, error) {
	var cu *commitUnknownError
	if began == beganInRecovery && stillInRecovery(pgConn) && errors.As(unknown, &cu) {
		p.resolved.notApplied.Add(1)
		return ClassConnectionLost, cu.err
	}
	p.resolved.unknown.Add(1)
	p.resolved.unsupported.Add(1)
	return ClassAmbiguous, unknown
}

// xidText renders an id as PostgreSQL's text for xid8.
func xidText(xid uint64) string { return strconv.FormatUint(xid, 10) }
