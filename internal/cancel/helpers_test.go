package cancel

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when a test or a fake moves it. The
// cancel goroutine reads it, so it is locked.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// The time each fake takes on the fake clock, so a cancel's latency is
// known: a query of the cancel pool, a protocol cancel request.
const (
	queryTakes    = time.Millisecond
	protocolTakes = 2 * time.Millisecond
)

// fakeSocket records the deadlines set on a connection's socket.
type fakeSocket struct{ deadlines []time.Time }

func (s *fakeSocket) SetDeadline(t time.Time) error {
	s.deadlines = append(s.deadlines, t)
	return nil
}

// last returns the deadline set last.
func (s *fakeSocket) last() time.Time { return s.deadlines[len(s.deadlines)-1] }

// protocolAnswer is how a fake connection's protocol cancel request ends.
type protocolAnswer int

const (
	// acked: the server acknowledged the request.
	acked protocolAnswer = iota
	// refused: the request could not be sent.
	refused
	// cutShort: the wait for the acknowledgement ended with ctx, and pgx
	// returns nil all the same.
	cutShort
)

// fakeConn is a connection whose protocol cancel answers as scripted.
type fakeConn struct {
	clk      *fakeClock
	pid      uint32
	protocol protocolAnswer
	requests atomic.Int32 // protocol cancel requests sent
	closed   atomic.Bool
}

func (c *fakeConn) PID() uint32 { return c.pid }

func (c *fakeConn) SecretKey() []byte { return []byte{0, 0, 0, 7} }

func (c *fakeConn) CancelRequest(ctx context.Context) error {
	c.requests.Add(1)
	c.clk.advance(protocolTakes)
	switch c.protocol {
	case refused:
		return errors.New("dial tcp: connection refused")
	case cutShort:
		<-ctx.Done()
	}
	return nil
}

func (c *fakeConn) Close(context.Context) error {
	c.closed.Store(true)
	return nil
}

// poolAnswer is how a fake cancel pool answers.
type poolAnswer struct {
	// acquireErr fails the acquire; busy makes it wait for its context.
	acquireErr error
	busy       bool
	// visible, ours and signalled are the query's row; err its error;
	// lost makes the query wait for its context, then fail.
	visible, ours, signalled bool
	err                      error
	lost                     bool
}

// fakePool is a cancel pool that answers as scripted.
type fakePool struct {
	clk      *fakeClock
	answer   poolAnswer
	acquires atomic.Int32
	queries  atomic.Int32
	released atomic.Int32
	// pid and start are the last query's arguments, and whileActive
	// whether it asked for an active backend.
	pid         atomic.Uint32
	start       atomic.Int64
	whileActive atomic.Bool
	// queried, when set, receives a value at each query.
	queried chan struct{}
}

func (p *fakePool) Acquire(ctx context.Context) (PoolConn, error) {
	p.acquires.Add(1)
	switch {
	case p.answer.busy:
		<-ctx.Done()
		return nil, ctx.Err()
	case p.answer.acquireErr != nil:
		return nil, p.answer.acquireErr
	}
	return fakePoolConn{p}, nil
}

type fakePoolConn struct{ p *fakePool }

func (c fakePoolConn) Cancel(ctx context.Context, t Target) (Answer, error) {
	p := c.p
	p.queries.Add(1)
	p.pid.Store(t.PID)
	p.start.Store(t.Start)
	p.whileActive.Store(t.WhileActive)
	p.clk.advance(queryTakes)
	if p.queried != nil {
		p.queried <- struct{}{}
	}
	if p.answer.lost {
		<-ctx.Done()
		return Answer{}, errors.New("read tcp: i/o timeout")
	}
	return Answer{Visible: p.answer.visible, Ours: p.answer.ours, Signalled: p.answer.signalled}, p.answer.err
}

func (c fakePoolConn) Release() { c.p.released.Add(1) }

// harness is a Canceller on a fake clock and fakes, with one connection's
// Handler and the cancellations reported.
type harness struct {
	clk     *fakeClock
	c       *Canceller
	h       *Handler
	conn    *fakeConn
	socket  *fakeSocket
	pool    *fakePool
	results []Result
	ctxs    []context.Context
}

// Where the fake clock starts against the system's, which runs the
// cancel's context: live leaves the context the whole grace, expired starts
// it with the grace already over.
const (
	live    = time.Hour
	expired = -time.Hour
)

// newHarness returns a harness with s (Pool and Finished filled in) whose
// clock starts at offset from now, and a connection of backend pid 4242.
func newHarness(t *testing.T, s Settings, offset time.Duration, pa poolAnswer, pr protocolAnswer) *harness {
	t.Helper()
	clk := &fakeClock{now: time.Now().Add(offset)}
	hs := &harness{
		clk:    clk,
		conn:   &fakeConn{clk: clk, pid: 4242, protocol: pr},
		socket: &fakeSocket{},
		pool:   &fakePool{clk: clk, answer: pa},
	}
	s.Pool = hs.pool
	if s.Resignal == 0 {
		s.Resignal = -1 // a statement the table's tests end returns at once
	}
	s.Finished = func(ctx context.Context, r Result) {
		hs.results = append(hs.results, r)
		hs.ctxs = append(hs.ctxs, ctx)
	}
	hs.c = New(s, clk)
	hs.h = &Handler{}
	hs.h.Init(hs.c, hs.conn, hs.socket)
	t.Cleanup(hs.c.Wait)
	return hs
}

// cancel runs one cancellation: the context ends, the cancel goroutine (if
// any) finishes, the statement returns after returnAfter more, and the
// watcher is unwatched. It returns the Result reported.
func (hs *harness) cancel(t *testing.T, returnAfter time.Duration) Result {
	t.Helper()
	n := len(hs.results)
	ctx, stop := context.WithCancel(context.Background())
	stop()
	hs.h.HandleCancel(ctx)
	if hs.h.sent != nil {
		<-hs.h.sent
	}
	hs.clk.advance(returnAfter)
	hs.h.HandleUnwatchAfterCancel()
	if len(hs.results) != n+1 {
		t.Fatalf("%d cancellations reported, want 1", len(hs.results)-n)
	}
	if hs.ctxs[n] != ctx {
		t.Error("the cancellation was reported with another context than the ended one")
	}
	return hs.results[n]
}
