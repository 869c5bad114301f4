package pgtx

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CancelMode is how a statement is stopped when its context ends.
type CancelMode int

const (
	// CancelModePool (the default) sends pg_cancel_backend(pid) over a small
	// dedicated cancel pool and waits for its answer before the connection
	// runs anything else or goes back to the pool. The statement stops on
	// the server at once (its locks are released now), the call gets 57014
	// back, and the connection is kept: no reconnect per timeout. The
	// backend is matched by pid and backend_start, so a recycled pid is
	// never signalled.
	//
	// The cancel pool's role must be allowed to cancel the main role's
	// backends (the same role, a member of it, or a member of
	// pg_signal_backend, which cannot cancel a superuser's) and to see their
	// backend_start in pg_stat_activity (the same role, a member of it, or
	// a member of pg_read_all_stats). When it cannot see the identity, or
	// cannot connect, may not cancel, or is busy, that cancel goes as the
	// protocol cancel request ([CancelModeProtocol]). So does every cancel of
	// a connection that does not reach its backend directly: pgtx compares,
	// when the connection is made, the pid the server reports for the
	// session with the one the connection was given, and behind a pooler
	// such as PgBouncer they differ.
	CancelModePool CancelMode = iota

	// CancelModeProtocol sends the wire protocol's CancelRequest (on a new
	// connection, with the backend's secret key, as libpq's PQcancel) and
	// waits until the server, or the pooler in front of it, acknowledges it
	// by closing that connection. It needs no privilege and no cancel pool,
	// and works behind PgBouncer, which routes cancel requests to the right
	// server connection. The connection is kept.
	CancelModeProtocol

	// CancelModeClose closes the connection at once, as pgx does by default
	// (pgx then sends a protocol cancel request in the background, without
	// waiting for it): the call returns soonest, but the pool pays a
	// reconnect for every cancelled statement, which under a timeout storm
	// becomes a reconnect storm.
	CancelModeClose
)

// In every mode a connection whose cancel is not confirmed finished (the
// cancel pool's answer or the protocol's acknowledgement did not arrive
// within Config.CancelGrace) is destroyed, never reused: the cancel may
// still arrive and would cancel the next borrower's statement.

// String returns the mode's name.
func (m CancelMode) String() string {
	switch m {
	case CancelModePool:
		return "pool"
	case CancelModeProtocol:
		return "protocol"
	case CancelModeClose:
		return "close"
	}
	return fmt.Sprintf("CancelMode(%d)", int(m))
}

// Defaults of the cancellation settings of Config.
const (
	defaultCancelGrace          = 2 * time.Second
	cancelPoolSize              = 2
	defaultCancelConnectTimeout = time.Second
)

// destroyWriteTimeout bounds the Terminate message written to a connection
// destroyed because its cancel was not confirmed.
const destroyWriteTimeout = 50 * time.Millisecond

// canceller is the pool-wide state of cancellation: the mode, the cancel
// pool, the statistics, and the goroutines of in-flight cancels, which it
// owns and waits for on close.
type canceller struct {
	mode    CancelMode
	grace   time.Duration
	resolve bool          // resolution is on: prepare connections for it
	pool    *pgxpool.Pool // CancelModePool only
	stats   cancelCounters
	tracer  CancelTracer // nil: no events

	// unhealthyUntil (unix nanoseconds) skips the cancel pool after it
	// could not be reached or used.
	unhealthyUntil atomic.Int64
	wg             sync.WaitGroup
}

// newCanceller builds the canceller for a main pool config. It opens the
// cancel pool (lazily connecting, one connection kept warm) in
// CancelModePool. resolve says that the pool resolves lost COMMITs, so
// its connections capture what that needs when they are made.
func newCanceller(ctx context.Context, cfg *Config, mainCfg *pgxpool.Config, resolve bool) (*canceller, error) {
	c := &canceller{mode: cfg.CancelMode, grace: defaultOrNone(cfg.CancelGrace, defaultCancelGrace), resolve: resolve}
	c.tracer, _ = cfg.Tracer.(CancelTracer)
	if c.mode == CancelModePool {
		cp, err := cancelPoolConfig(cfg, mainCfg)
		if err != nil {
			return nil, err
		}
		if c.pool, err = newPgxpool(ctx, cp); err != nil {
			return nil, fmt.Errorf("pgtx: cancel pool: %w", err)
		}
	}
	return c, nil
}

// close waits for in-flight cancels (each bounded by the grace), then closes
// the cancel pool.
func (c *canceller) close() {
	c.wg.Wait()
	if c.pool != nil {
		c.pool.Close()
	}
}

// cancelHandler is the ctxwatch.Handler of one main-pool connection.
type cancelHandler struct {
	c       *canceller
	pgConn  *pgconn.PgConn
	netConn net.Conn

	// ready is set once the connection is set up (AfterConnect): before, it
	// has no identity to cancel by, and a cancel closes it.
	ready atomic.Bool
	// direct reports that the connection's backend pid is PgConn.PID(), so
	// pg_cancel_backend can reach it; false behind a pooler, whose cancel
	// key is not a backend's pid.
	direct atomic.Bool
	// backendStart is the backend's start time in unix microseconds (with
	// the pid, its identity); valid when direct.
	backendStart atomic.Int64

	// doomed is set on a connection that must not be used again; the pool
	// destroys it instead of handing it out (usable).
	doomed atomic.Bool

	// The in-flight cancel, set by HandleCancel and read by
	// HandleUnwatchAfterCancel once done is closed.
	done      chan struct{}   // nil when no cancel goroutine runs
	ctx       context.Context // the ended context, for the tracer
	began     time.Time
	deadline  time.Time // when the grace ends
	result    cancelResult
	confirmed bool // written before done is closed
}

// cancelOutcome is how a cancellation ended.
type cancelOutcome int

const (
	cancelSignalled cancelOutcome = iota + 1 // pg_cancel_backend signalled the backend
	cancelNotFound                           // the backend no longer existed: nothing signalled
	cancelProtocol                           // the protocol cancel request was delivered
	cancelClosed                             // the connection was closed instead
)

// cancelResult is what a cancel's goroutine found.
type cancelResult struct {
	outcome  cancelOutcome
	fellBack bool
	latency  time.Duration
}

// HandleCancel is called when the context of a running statement ends. It
// arms the grace (a deadline on the socket, so the call returns even if the
// cancel never takes effect) and sends the cancel asynchronously. A
// connection that is not set up yet, or in CancelModeClose, is closed at
// once instead.
func (h *cancelHandler) HandleCancel(ctx context.Context) {
	h.ctx, h.began = ctx, time.Now()
	h.done, h.confirmed = nil, false
	if h.c.mode == CancelModeClose || !h.ready.Load() {
		h.deadline = h.began
		_ = h.netConn.SetDeadline(h.began)
		h.result = cancelResult{outcome: cancelClosed}
		return
	}
	h.deadline = time.Time{} // CancelGrace off: no bound of its own
	if h.c.grace > 0 {
		h.deadline = h.began.Add(h.c.grace)
	}
	_ = h.netConn.SetDeadline(h.deadline)
	done := make(chan struct{})
	h.done = done
	h.c.wg.Add(1)
	go func() {
		defer h.c.wg.Done()
		defer close(done)
		h.result, h.confirmed = h.send(h.deadline)
		h.result.latency = time.Since(h.began)
	}()
}

// HandleUnwatchAfterCancel is called when the statement has returned. It
// waits for the in-flight cancel (bounded by the grace). Only a cancel
// confirmed finished, for a statement that returned within the grace, lets
// the connection be used again: a cancel whose outcome is unknown may still
// arrive and would cancel the next statement. Such a connection is
// destroyed.
func (h *cancelHandler) HandleUnwatchAfterCancel() {
	returned := time.Now()
	if h.done != nil {
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
		_ = h.netConn.SetDeadline(time.Now().Add(destroyWriteTimeout))
		_ = h.pgConn.Close(context.Background())
		r.outcome = cancelClosed
	default:
		// The grace ran out: the read failed on the socket's deadline and
		// pgconn closes the connection as this returns, sending a protocol
		// cancel first so the statement stops; that cancel can only reach
		// this backend. The deadline stays passed, and the pool discards
		// the connection if anything is left of it (doomed).
		_ = h.netConn.SetDeadline(h.began)
		h.doomed.Store(true)
		r.outcome = cancelClosed
	}
	h.c.finish(h.ctx, h.pgConn.PID(), r, h.began)
	h.ctx = nil
}

// send cancels the statement and reports whether the cancel is confirmed
// finished: over the cancel pool when the backend is reachable there, else
// (or when the cancel pool could not send it) with the protocol cancel
// request.
func (h *cancelHandler) send(deadline time.Time) (r cancelResult, confirmed bool) {
	ctx, cancel := context.WithCancel(context.Background())
	if !deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, deadline)
	}
	defer cancel()
	h.c.stats.sent.Add(1)
	if h.c.mode == CancelModePool && h.direct.Load() {
		switch res := h.c.viaPool(ctx, h.pgConn.PID(), h.backendStart.Load()); res {
		case poolSignalled:
			return cancelResult{outcome: cancelSignalled}, true
		case poolNotFound:
			return cancelResult{outcome: cancelNotFound}, true
		case poolUnknown:
			// The signal may still arrive, so the connection cannot be kept;
			// if there is time, stop the statement (and its locks) now all
			// the same. Either cancel can only reach this backend.
			if ctx.Err() == nil {
				h.c.protocolCancel(ctx, h.pgConn)
			}
			return cancelResult{outcome: cancelClosed, fellBack: true}, false
		}
		r.fellBack = true
	}
	if h.c.protocolCancel(ctx, h.pgConn) {
		h.c.stats.protocol.Add(1)
		r.outcome = cancelProtocol
		return r, true
	}
	r.outcome = cancelClosed
	return r, false
}

// protocolCancel sends the protocol's CancelRequest and reports whether the
// server (or the pooler in front of it) acknowledged it by closing the
// cancel connection before ctx ended. pgx's CancelRequest returns nil also
// when its wait for that acknowledgement is cut short by ctx, so the
// context is what tells the two apart: a request that may still be on its
// way is never counted as finished.
func (c *canceller) protocolCancel(ctx context.Context, pgConn *pgconn.PgConn) bool {
	err := pgConn.CancelRequest(ctx)
	return err == nil && ctx.Err() == nil
}

// finish records a finished cancellation and reports it to the tracer.
func (c *canceller) finish(ctx context.Context, pid uint32, r cancelResult, began time.Time) {
	if r.outcome == cancelClosed {
		c.stats.closed.Add(1)
	}
	if r.latency == 0 {
		r.latency = time.Since(began)
	}
	c.stats.latency.observe(r.latency)
	if c.tracer != nil {
		c.tracer.TraceCancel(ctx, TraceCancelData{PID: pid, Mode: c.mode, Closed: r.outcome == cancelClosed, NotFound: r.outcome == cancelNotFound,
			FellBack: r.fellBack, Latency: r.latency})
	}
}
