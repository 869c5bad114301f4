package txn

import (
	"context"
	"time"

	"github.com/pgtx-go/pgtx/internal/params"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// Settings are what a pool's transactions need of it, resolved once per
// pool by the root (defaults applied, a negative setting already 0).
type Settings struct {
	CommitTimeout   time.Duration // bounds COMMIT; 0: no bound of its own
	RollbackTimeout time.Duration // bounds ROLLBACK; 0: no bound of its own
	// SessionTimeout is the session's statement_timeout pgtx sent (0:
	// none sent): a deadline carried to the server never raises it.
	SessionTimeout time.Duration
	// Resolving says the pool resolves the COMMITs that lost their answer,
	// within ResolveTimeout, asking Resolver, waiting on Clock and
	// counting the outcomes in Counters.
	Resolving      bool
	ResolveTimeout time.Duration
	// UnavailableTimeout is how long a resolution waits, beyond
	// ResolveTimeout, while no server can be reached (0: not at all).
	UnavailableTimeout time.Duration
	Resolver           Resolver
	Clock              resolve.Clock
	Counters           *resolve.Counters
	// Captured, when set, is told the system and run that a connection's
	// capture found ([SetUp]) on a server out of recovery, once per
	// connection: a run later than the pool knew is a failover or a
	// restart.
	Captured func(system int64, run resolve.Run)
}

// Resolver asks a server what became of a transaction ([resolve.Resolver]).
type Resolver interface {
	resolve.Asker
	// BackendXid finds the id of the transaction the backend pid (started
	// at start) still runs, waiting with sleep between tries.
	BackendXid(ctx context.Context, pid uint32, start int64, sleep func(context.Context) error) (uint64, bool)
}

// deadlineMargin is added to the time left before the context's deadline
// when it becomes the transaction's statement_timeout: the client's own
// cancel comes first (and keeps the connection); the server's is the net
// for a client that died or a cancel that was lost.
const deadlineMargin = 100 * time.Millisecond

// statementTimeout returns the statement_timeout the transaction sets, in
// milliseconds (0: none), and whether it sets one: the call's (call > 0;
// < 0: none; 0: the session's), or the time left before ctx's deadline
// when that is shorter than the one in force.
func statementTimeout(ctx context.Context, call, session time.Duration) (int64, bool) {
	timeout := call
	inForce := session
	if timeout != 0 {
		inForce = max(timeout, 0)
	}
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d) + deadlineMargin
		if inForce <= 0 || left < inForce {
			timeout = max(left, time.Millisecond)
		}
	}
	if timeout == 0 {
		return 0, false
	}
	return params.Millis(max(timeout, 0)), true
}

// deadlineAfter returns the socket deadline d from now, or the zero time
// (no deadline) when d is not positive: the setting is off.
func deadlineAfter(d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}

// uncancellable returns ctx without its cancellation (values kept, for
// tracers). A context that cannot be cancelled is returned as is, so pgx
// does not watch it either.
func uncancellable(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
