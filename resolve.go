package pgtx

import (
	"time"

	"github.com/pgtx-go/pgtx/internal/resolve"
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

// resolveStats reads c into a ResolveStats.
func resolveStats(c *resolve.Counters) ResolveStats {
	return ResolveStats{
		CommittedCount: c.Committed.Load(), AbortedCount: c.Aborted.Load(), LostCount: c.Lost.Load(),
		NotAppliedCount: c.NotApplied.Load(), UnknownCount: c.Unknown.Load(),
		UnsupportedCount: c.Unsupported.Load(), ElsewhereCount: c.Elsewhere.Load(), RestartedCount: c.Restarted.Load(),
		ForgottenCount: c.Forgotten.Load(), UnansweredCount: c.Unanswered.Load(),
		TerminatedCount: c.Terminated.Load(),
	}
}
