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
	// statement runs on a standby's): the statement is cancelled on the
	// Standby, or with the protocol cancel request, which reaches every
	// backend of the session.
	WhileActive bool
	// Standby, when set, is the backend that runs the connection's
	// statements when the target's runs none (behind Pgpool-II, the
	// session's load-balancing node's, a standby's): the cancel pool
	// cannot reach it, and it is cancelled on its own server.
	Standby *Standby
}

// Standby is a backend on a server of its own, which the cancel pool does
// not reach.
type Standby struct {
	// Addr is its server's address (host:port), PID and Start (unix
	// microseconds) name it.
	Addr  string
	PID   uint32
	Start int64
	// OwnKey: the connection's own pid and cancel key are this backend's
	// (Pgpool-II hands its clients one of its backends' keys), so the
	// connection's cancel request sent straight to Addr reaches it, with
	// no login; otherwise the cancel query runs on a connection of its own
	// to Addr.
	OwnKey bool
}

// SetTarget sets, before the connection is ready, the backend that
// [ModePool] cancels over the cancel pool. The zero Target leaves the
// protocol cancel request as the way to the backend: behind a pooler whose
// pids are not its backends', or on a server that could not tell.
func (h *Handler) SetTarget(t Target) { h.target = t }
