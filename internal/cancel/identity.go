package cancel

// Target is the backend pg_cancel_backend signals for a connection, found
// when the connection is made ([Handler.SetTarget]).
type Target struct {
	// PID and Start (unix microseconds) name the backend: a pid alone may
	// be recycled.
	PID   uint32
	Start int64
	// WhileActive: the backend is signalled only while it runs a
	// statement. One that runs none is not where the connection's statement
	// runs (behind Pgpool-II, the primary's backend while a balanced
	// statement runs on a standby's), and the protocol cancel request goes
	// instead, which reaches every backend of the session.
	WhileActive bool
	// Balanced, when set, is the address of the server whose backend runs
	// the connection's statements when the target's does not (behind
	// Pgpool-II, the session's load-balancing node), and whose backend the
	// connection's own pid and cancel key are: a cancel request sent
	// there, past the pooler, reaches it at once.
	Balanced string
}

// SetTarget sets, before the connection is ready, the backend that
// [ModePool] cancels over the cancel pool. The zero Target leaves the
// protocol cancel request as the way to the backend: behind a pooler whose
// pids are not its backends', or on a server that could not tell.
func (h *Handler) SetTarget(t Target) { h.target = t }
