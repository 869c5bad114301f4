package txn

import (
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/connstate"
)

// Kind is what an attempt's transaction can be resolved with.
type Kind uint8

// The kinds of transaction.
const (
	Plain      Kind = iota // the pool does not resolve
	Captured               // its id is read: resolvable
	Uncaptured             // a resolving pool, a server that cannot be asked
	InRecovery             // a resolving pool, on a hot standby: it writes nothing
	OnPromoted             // a resolving pool, a connection whose capture was made on a standby since promoted
	Balanced               // a resolving pool, a read-only transaction Pgpool-II may answer from a standby: it writes nothing
)

// capture is what the first write reads for a resolution.
type capture uint8

const (
	captureNone  capture = iota // nothing: the pool does not resolve, or the server cannot be asked
	captureID                   // the id (a direct connection: its run was captured before its first transaction)
	captureIDRun                // the id and the server's run (behind a pooler)
)

// kindOn returns how a transaction on pgConn (whose state is st) is
// resolved, and what its first write captures; balanced: a read-only
// transaction that Pgpool-II may answer from a standby.
func kindOn(resolving bool, pgConn *pgconn.PgConn, st *connstate.State, balanced bool) (Kind, capture) {
	if !resolving {
		return Plain, captureNone
	}
	switch {
	case balanced:
		// Read-only: no id can be given, and none is needed. Its read
		// would go to the primary, and make Pgpool-II send the rest there.
		return Balanced, captureNone
	case st == nil || !st.Res.Capable:
		return Uncaptured, captureNone
	case st.Res.InRecovery(pgConn):
		// No id can be given in recovery, and none is needed: a
		// transaction begun there can change nothing.
		return InRecovery, captureNone
	case st.Res.Standby:
		// Captured on a standby since promoted: the run it captured is
		// not the one its transactions now run in.
		return OnPromoted, captureNone
	case !st.Res.Direct:
		return Captured, captureIDRun
	}
	return Captured, captureID
}
