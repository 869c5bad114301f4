package cancel

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// DestroyWriteTimeout bounds the Terminate message written to a connection
// destroyed because its cancel was not confirmed.
const DestroyWriteTimeout = 50 * time.Millisecond

// Conn is the connection a [Handler] cancels the statements of:
// *pgconn.PgConn.
type Conn interface {
	// PID is the backend's pid (behind a pooler, its cancel key's).
	PID() uint32
	// SecretKey is the connection's cancel key.
	SecretKey() []byte
	// CancelRequest sends the protocol's CancelRequest and waits, until ctx
	// ends, for the server to acknowledge it by closing that connection.
	CancelRequest(ctx context.Context) error
	// Close closes the connection.
	Close(ctx context.Context) error
}

// Deadliner is the connection's socket as a [Handler] bounds its reads and
// writes: net.Conn.
type Deadliner interface {
	SetDeadline(t time.Time) error
}

// Handler is the ctxwatch.Handler of one connection. Its zero value is
// made usable by [Handler.Init], once, before the connection runs anything.
type Handler struct {
	c       *Canceller
	conn    Conn
	netConn Deadliner

	// ready is set once the connection is set up: before, it has no
	// identity to cancel by, and a cancel closes it.
	ready atomic.Bool
	// target is the backend pg_cancel_backend signals ([Handler.SetTarget]);
	// set before ready, read by the cancels after.
	target Target

	// doomed is set on a connection that must not be used again; the pool
	// destroys it instead of handing it out ([Handler.Doomed]).
	doomed atomic.Bool

	// The in-flight cancel, set by HandleCancel and read by
	// HandleUnwatchAfterCancel once done is closed.
	done      chan struct{}   // nil when no cancel goroutine runs
	sent      chan struct{}   // closed once the first cancel's result is in
	returned  chan struct{}   // closed when the statement has returned
	ctx       context.Context // the ended context, for the report
	began     time.Time
	deadline  time.Time // when the grace ends
	result    Result
	confirmed bool // written before done is closed
}

var _ ctxwatch.Handler = (*Handler)(nil)

// Init makes h the handler of conn, whose socket is netConn, for c.
func (h *Handler) Init(c *Canceller, conn Conn, netConn Deadliner) {
	h.c, h.conn, h.netConn = c, conn, netConn
}

// SetReady marks the connection set up: from now on a cancel stops its
// statement instead of closing it. The first connection set up lets the
// cancel pool connect ([Open]).
func (h *Handler) SetReady() {
	h.ready.Store(true)
	h.c.mainReadyOnce.Do(func() { close(h.c.mainReady) })
}

// Doomed reports that the connection's cancel was not confirmed finished:
// it may still arrive and would cancel the next borrower's statement, so the
// connection must be destroyed, never used again.
func (h *Handler) Doomed() bool { return h.doomed.Load() }

// HandleCancel is called when the context of a running statement ends. It
// arms the grace (a deadline on the socket, so the call returns even if the
// cancel never takes effect) and sends the cancel asynchronously. A
// connection that is not set up yet, or in ModeClose, is closed at once
// instead.
func (h *Handler) HandleCancel(ctx context.Context) {
	h.ctx, h.began = ctx, h.c.clock.Now()
	h.done, h.confirmed = nil, false
	if h.c.s.Mode == ModeClose || !h.ready.Load() {
		h.deadline = h.began
		_ = h.netConn.SetDeadline(h.began)
		h.result = Result{Outcome: Closed}
		return
	}
	h.deadline = time.Time{} // the grace off: no bound of its own
	if h.c.s.Grace > 0 {
		h.deadline = h.began.Add(h.c.s.Grace)
	}
	_ = h.netConn.SetDeadline(h.deadline)
	done, sent := make(chan struct{}), make(chan struct{})
	h.done, h.sent, h.returned = done, sent, make(chan struct{})
	h.c.wg.Add(1)
	go func() {
		defer h.c.wg.Done()
		defer close(done)
		ctx, cancel := context.WithCancel(context.Background())
		if !h.deadline.IsZero() {
			ctx, cancel = context.WithDeadline(ctx, h.deadline)
		}
		defer cancel()
		r, confirmed := h.send(ctx)
		r.Latency = h.c.clock.Now().Sub(h.began)
		h.result, h.confirmed = r, confirmed
		close(sent)
		if confirmed && r.Outcome == Signalled && !h.resignal(ctx) {
			h.confirmed = false
		}
	}()
}

// HandleUnwatchAfterCancel is called when the statement has returned. It
// waits for the in-flight cancel (bounded by the grace). Only a cancel
// confirmed finished, for a statement that returned within the grace, lets
// the connection be used again: a cancel whose outcome is unknown may still
// arrive and would cancel the next statement. Such a connection is
// destroyed.
func (h *Handler) HandleUnwatchAfterCancel() {
	returned := h.c.clock.Now()
	if h.done != nil {
		close(h.returned)
		<-h.done
		h.done = nil
	}
	r := h.result
	inGrace := h.deadline.IsZero() || returned.Before(h.deadline)
	switch {
	case h.confirmed && inGrace:
		_ = h.netConn.SetDeadline(time.Time{})
	case inGrace:
		// The statement is over and its backend idle: close the connection
		// now (a late cancel finds nothing to cancel). Background: inside
		// the context watcher, Close must not watch a context of its own.
		_ = h.netConn.SetDeadline(h.c.clock.Now().Add(DestroyWriteTimeout))
		_ = h.conn.Close(context.Background())
		r.Outcome = Closed
	default:
		// The grace ran out: the read failed on the socket's deadline and
		// pgconn closes the connection as this returns, sending a protocol
		// cancel first so the statement stops; that cancel can only reach
		// this backend. The deadline stays passed, and the pool discards
		// the connection if anything is left of it (doomed).
		_ = h.netConn.SetDeadline(h.began)
		h.doomed.Store(true)
		r.Outcome = Closed
	}
	r.PID = h.conn.PID()
	h.c.finish(h.ctx, r, h.began)
	h.ctx = nil
}

// send cancels the statement and reports whether the cancel is confirmed
// finished: over the cancel pool when the backend is reachable there, else
// (or when the cancel pool could not send it) with the protocol cancel
// request.
func (h *Handler) send(ctx context.Context) (r Result, confirmed bool) {
	h.c.sent.Add(1)
	if h.c.s.Mode == ModePool && h.target.PID != 0 {
		switch res := h.c.viaPool(ctx, h.target); res {
		case poolSignalled:
			h.c.signalled.Add(1)
			return Result{Outcome: Signalled}, true
		case poolNotFound:
			return Result{Outcome: NotFound}, true
		case poolElsewhere:
			if s := h.target.Standby; s != nil {
				r, ok, unknown := h.c.onStandby(ctx, s, h.conn)
				if ok {
					return r, true
				}
				if unknown {
					if ctx.Err() == nil {
						protocolCancel(ctx, h.conn)
					}
					return Result{Outcome: Closed, FellBack: true}, false
				}
			}
		case poolUnknown:
			// The signal may still arrive, so the connection cannot be kept;
			// if there is time, stop the statement (and its locks) now all
			// the same. Either cancel can only reach this backend.
			if ctx.Err() == nil {
				protocolCancel(ctx, h.conn)
			}
			return Result{Outcome: Closed, FellBack: true}, false
		}
		r.FellBack = true
	}
	if protocolCancel(ctx, h.conn) {
		h.c.protocol.Add(1)
		r.Outcome = Protocol
		return r, true
	}
	r.Outcome = Closed
	return r, false
}

// resignal signals the backend again while the statement has not
// returned ([Settings].Resignal), and reports whether every signal sent is
// confirmed finished: one whose answer was lost may still arrive.
func (h *Handler) resignal(ctx context.Context) bool {
	wait := h.c.s.Resignal
	if wait < 0 {
		return true
	}
	if wait == 0 {
		wait = resignalFirst
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-h.returned:
			return true
		case <-ctx.Done():
			return true
		case <-h.c.closing:
			return true
		case <-timer.C:
		}
		switch h.c.viaPool(ctx, h.target) {
		case poolSignalled:
		case poolUnknown:
			return false
		default:
			// Not sent, or the backend runs no statement of ours: the
			// first signal stands.
			return true
		}
		wait *= 2
		timer.Reset(wait)
	}
}

// protocolCancel sends the protocol's CancelRequest and reports whether the
// server (or the pooler in front of it) acknowledged it by closing the
// cancel connection before ctx ended. pgx's CancelRequest returns nil also
// when its wait for that acknowledgement is cut short by ctx, so the
// context is what tells the two apart: a request that may still be on its
// way is never counted as finished.
func protocolCancel(ctx context.Context, conn Conn) bool {
	err := conn.CancelRequest(ctx)
	return err == nil && ctx.Err() == nil
}
