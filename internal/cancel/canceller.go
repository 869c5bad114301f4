package cancel

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/internal/histogram"
)

// Mode is how a statement is stopped when its context ends. Its values are
// those of pgtx.CancelMode, in the same order.
type Mode int

// The modes, numbered as pgtx's.
const (
	// ModePool cancels with pg_cancel_backend over the cancel pool, falling
	// back to the protocol cancel request.
	ModePool Mode = iota
	// ModeProtocol cancels with the protocol cancel request.
	ModeProtocol
	// ModeClose closes the connection.
	ModeClose
)

// Outcome is how a cancellation ended.
type Outcome int

// The outcomes of a cancellation.
const (
	// Signalled means that pg_cancel_backend signalled the backend.
	Signalled Outcome = iota + 1
	// NotFound means that the backend no longer existed: nothing was
	// signalled.
	NotFound
	// Protocol means that the protocol cancel request was delivered.
	Protocol
	// Closed means that the connection was closed instead (or will be: it
	// is doomed), never to be used again.
	Closed
)

// Result describes a finished cancellation.
type Result struct {
	// PID is the cancelled connection's backend pid (its cancel key behind
	// a pooler).
	PID     uint32
	Outcome Outcome
	// FellBack reports that the cancel pool failed and the protocol cancel
	// request was sent instead.
	FellBack bool
	// Latency is the time from the context's end to the cancel's answer.
	Latency time.Duration
}

// Counts is a snapshot of a [Canceller]'s counters.
type Counts struct {
	// Sent counts cancels sent (over the cancel pool or with the protocol
	// cancel request).
	Sent int64
	// Signalled and NotFound count the cancel pool's answers: the backend
	// was signalled, or was gone.
	Signalled, NotFound int64
	// PoolErrors counts cancels the cancel pool could not deliver.
	PoolErrors int64
	// Protocol counts cancels delivered with the protocol cancel request.
	Protocol int64
	// Closed counts connections a cancellation destroyed.
	Closed int64
}

// resignalFirst is [Settings].Resignal's default.
const resignalFirst = 50 * time.Millisecond

// Clock tells a [Canceller] the time, from which it sets the sockets'
// deadlines and the cancel's: in use the system's clock; tests pass a fake
// one, with fake connections.
type Clock interface{ Now() time.Time }

// Settings configures a [Canceller]. Its owner has applied every default
// already.
type Settings struct {
	Mode Mode
	// Grace bounds a cancellation: a statement that has not returned this
	// long after its context ended fails on its socket's deadline, and a
	// connection whose cancel was not confirmed within it is destroyed. 0:
	// no bound of its own.
	Grace time.Duration
	// DefaultGrace is the grace's default, of which a share still bounds
	// the wait for a cancel-pool connection when Grace is 0.
	DefaultGrace time.Duration
	// Pool is the cancel pool; it must be set in ModePool.
	Pool Pool
	// Finished, when set, receives every finished cancellation once it is
	// counted. ctx is the statement's ended context.
	Finished func(ctx context.Context, r Result)
	// Resignal is how long a statement whose backend the cancel pool
	// signalled may run on before it is signalled again, the wait doubling
	// each time, until it returns or the grace ends: a backend ignores a
	// signal that arrives while it reads its next message, even one its
	// client already sent in the same write (a pipeline, or a pooler
	// forwarding one message at a time), and pg_stat_activity shows it
	// active until the pipeline's Sync. 0: resignalFirst; negative: never.
	Resignal time.Duration
	// Dial connects to a server for a cancel request sent past a pooler
	// ([Standby].OwnKey); nil: a net.Dialer's.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Node runs the cancel query for t on a connection of its own to the
	// server at addr, past a pooler ([Standby]); nil: none can. [Open]
	// sets it in ModePool.
	Node func(ctx context.Context, addr string, t Target) (Answer, error)
}

// Canceller is the pool-wide state of cancellation: the settings, the
// cancel pool (which it owns when [Open] opened it) and its health, the
// counters and the latencies, and the goroutines of in-flight cancels,
// which it owns and waits for ([Canceller.Wait]). Each connection has a
// [Handler] of it.
type Canceller struct {
	s     Settings
	clock Clock
	pool  *pgxpool.Pool // the cancel pool Open opened; nil: none
	// limited is pool with its slot limit; nil: none.
	limited *Limited

	sent, signalled, notFound, poolErrors, protocol, closed atomic.Int64
	// latency is the distribution of the finished cancellations'.
	latency histogram.Live

	// unhealthyUntil (unix nanoseconds) skips the cancel pool after it
	// could not be reached or used.
	unhealthyUntil atomic.Int64
	wg             sync.WaitGroup

	// mainReady is closed when the main pool's first connection is set up
	// ([Handler.SetReady]), closing by Close: the cancel pool's connects
	// wait for one of them ([Canceller.waitMainReady]).
	mainReady, closing         chan struct{}
	mainReadyOnce, closingOnce sync.Once
}

// New returns a Canceller with s, on clk.
func New(s Settings, clk Clock) *Canceller {
	return &Canceller{s: s, clock: clk, mainReady: make(chan struct{}), closing: make(chan struct{})}
}

// Wait waits for the in-flight cancels, each bounded by the grace. The
// cancel pool may be closed once it returns.
func (c *Canceller) Wait() { c.wg.Wait() }

// Close waits for the in-flight cancels ([Canceller.Wait]), then closes
// the cancel pool [Open] opened; a connect of it still waiting for the
// main pool fails.
func (c *Canceller) Close() {
	c.closingOnce.Do(func() { close(c.closing) })
	c.Wait()
	if c.pool != nil {
		c.pool.Close()
	}
}

// errClosedFirst is the error of a cancel-pool connect that waited for the
// main pool's first connection until the pool was closed.
var errClosedFirst = errors.New("pgtx: cancel pool: closed before the main pool had a connection")

// waitMainReady waits until the main pool has a connection set up, or
// returns an error when c is closed or ctx ends first.
func (c *Canceller) waitMainReady(ctx context.Context) error {
	select {
	case <-c.mainReady:
		return nil
	default:
	}
	select {
	case <-c.mainReady:
		return nil
	case <-c.closing:
		return errClosedFirst
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Pool returns the cancel pool [Open] opened, or nil.
func (c *Canceller) Pool() *pgxpool.Pool { return c.pool }

// Grace returns [Settings].Grace.
func (c *Canceller) Grace() time.Duration { return c.s.Grace }

// Counts returns a snapshot of the counters.
func (c *Canceller) Counts() Counts {
	return Counts{
		Sent: c.sent.Load(), Signalled: c.signalled.Load(), NotFound: c.notFound.Load(),
		PoolErrors: c.poolErrors.Load(), Protocol: c.protocol.Load(), Closed: c.closed.Load(),
	}
}

// Latency returns the distribution of the finished cancellations'
// latencies, from the context's end to the cancel's answer.
func (c *Canceller) Latency() histogram.Snapshot { return c.latency.Snapshot() }

// finish records a finished cancellation and reports it.
func (c *Canceller) finish(ctx context.Context, r Result, began time.Time) {
	if r.Outcome == Closed {
		c.closed.Add(1)
	}
	if r.Latency == 0 {
		r.Latency = c.clock.Now().Sub(began)
	}
	c.latency.Observe(r.Latency)
	if c.s.Finished != nil {
		c.s.Finished(ctx, r)
	}
}
