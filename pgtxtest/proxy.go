package pgtxtest

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Wire-protocol limits and request codes. They mirror the server's own
// (MAX_STARTUP_PACKET_LENGTH and PQ_LARGE_MESSAGE_LIMIT in PostgreSQL).
const (
	maxStartupLen     = 10000
	maxMessageLen     = 0x3fffffff
	cancelRequestCode = 80877102
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
	maxNegotiations   = 4 // SSLRequest/GSSENCRequest packets accepted before a startup
)

// Timeouts that keep every wait of the proxy bounded.
const (
	// dialTimeout bounds connecting to the upstream server.
	dialTimeout = 10 * time.Second
	// drainTimeout bounds how long the proxy keeps reading (and discarding)
	// from the server after a cut, so that the server can finish the last
	// forwarded message and see a clean end of stream instead of a reset.
	drainTimeout = 5 * time.Second
	// inspectInline is the body size up to which an inspected message is read
	// into one exactly sized buffer; larger bodies grow as bytes arrive, so a
	// bogus length cannot make the proxy allocate up front.
	inspectInline = 64 << 10
)

// Reasons a connection's client→server pump stops.
var (
	errMalformed  = errors.New("pgtxtest proxy: malformed client message")
	errClientGone = errors.New("pgtxtest proxy: client closed the connection")
	errServerGone = errors.New("pgtxtest proxy: server connection failed")
	errCut        = errors.New("pgtxtest proxy: connection cut")
	errStalled    = errors.New("pgtxtest proxy: connection stalled")
)

// Proxy is a fault-injecting TCP proxy in front of one Postgres server.
//
// It understands enough of the PostgreSQL wire protocol to recognise client
// statements: simple-protocol Query messages and extended-protocol Parse,
// Bind, Execute, Close, Sync and Flush messages. Every message is forwarded
// byte for byte unless a fault rule fires. SSLRequest and GSSENCRequest are
// answered with 'N' by the proxy itself (clients that require TLS or GSS
// encryption cannot connect through it); CancelRequest connections are
// forwarded unchanged, except that a cancel aimed at the backend of a
// connection the proxy has just cut is held until the proxy has finished
// with that backend's socket (see CutAfterForward), a cancel aimed at the
// backend of a stalled connection is held until the stall ends (see
// StallOnCommit), and latency (SetLatency, SetConnLatency) holds them like
// any other client message.
//
// Fault rules (CutAfterForward, CutBeforeForward, CutOnCommit,
// CutOnCommitReply, StallOnCommit, FailCommits, FailEveryCommitOnce,
// SlowStatements) are shared by all connections.
// Statements are matched on the text of a simple Query message, or on the
// SQL of the Parse message that created an extended-protocol statement; see
// CutAfterForward and CutBeforeForward for exactly when an
// extended-protocol statement fires a rule.
//
// All methods are safe for concurrent use. A Proxy owns every goroutine it
// starts and Close joins them all.
type Proxy struct {
	upstream string
	ln       net.Listener
	ctx      context.Context // cancelled by Close; aborts upstream dials and waits
	cancel   context.CancelFunc
	wg       sync.WaitGroup // the accept loop and every connection goroutine

	closeOnce sync.Once
	closeErr  error

	latency     atomic.Int64               // time.Duration added to every client→server message
	typeLatency [numConnTypes]atomic.Int64 // per ConnType, see SetConnLatency
	refuse      atomic.Bool

	tb testing.TB // the test of a proxy from NewProxy, which a refused argument fails

	mu     sync.Mutex
	closed bool
	conns  map[*proxyConn]struct{}
	rules  []*rule

	// Failing COMMITs (FailCommits, FailEveryCommitOnce), under mu.
	failN       int    // COMMITs left to fail; -1: every one
	failCode    string // FailCommits' SQLSTATE
	everyCode   string // FailEveryCommitOnce's SQLSTATE, "" when off
	everyCounts map[[sha256.Size]byte]int
	failArmed   atomic.Bool // a COMMIT may fail: failN != 0 or everyCode != ""
	everyOn     atomic.Bool // everyCode != "": connections fingerprint their transactions

	slowRules []slowRule  // SlowStatements, under mu
	slowOn    atomic.Bool // len(slowRules) > 0

	accepted, refused, active      atomic.Int64
	cutsAfter, cutsBefore, cutsAll atomic.Int64
	cutsOnReply                    atomic.Int64
	stalls                         atomic.Int64
	statements                     atomic.Int64
	injected, slowed               atomic.Int64
}

// ProxyStats is a snapshot of a Proxy's counters, as returned by Stats.
type ProxyStats struct {
	// Accepted counts client connections accepted and proxied, including
	// CancelRequest connections but not connections refused by RefuseNew.
	Accepted int64
	// Refused counts client connections closed at once because RefuseNew
	// was on.
	Refused int64
	// Active is the number of proxied connections not yet fully closed. A
	// connection that was cut may stay active for a moment while the proxy
	// lets the server finish reading it; a stalled connection stays active
	// until it is released.
	Active int64
	// CutsAfterForward counts connections cut by a CutAfterForward or
	// CutOnCommit rule.
	CutsAfterForward int64
	// CutsBeforeForward counts connections cut by a CutBeforeForward rule.
	CutsBeforeForward int64
	// CutsAll counts connections cut by CutAll.
	CutsAll int64
	// CutsOnCommitReply counts connections cut by a CutOnCommitReply rule.
	CutsOnCommitReply int64
	// Stalls counts connections stalled by a StallOnCommit rule or by
	// StallAll.
	Stalls int64
	// Statements counts simple-protocol Query messages plus
	// extended-protocol Parse messages seen from clients.
	Statements int64
	// InjectedFailures counts the COMMITs that FailCommits and
	// FailEveryCommitOnce made fail.
	InjectedFailures int64
	// SlowedStatements counts the statements that SlowStatements held.
	SlowedStatements int64
}

// NewProxy starts a Proxy that listens on 127.0.0.1 on a free port and
// forwards to upstream (host:port). It fails tb if the proxy cannot start
// and closes the proxy in tb.Cleanup, which ends all of its goroutines.
func NewProxy(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	p, err := StartProxy(upstream)
	if err != nil {
		tb.Fatalf("pgtxtest: start proxy: %v", err)
	}
	p.tb = tb
	tb.Cleanup(func() {
		tb.Helper() // a failure to close is reported at the line of the call
		if err := p.Close(); err != nil {
			tb.Errorf("pgtxtest: close proxy: %v", err)
		}
	})
	return p
}

// StartProxy is like NewProxy without a testing.TB, for example programs
// and chaos tools. The caller must call Close.
func StartProxy(upstream string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		return nil, fmt.Errorf("pgtxtest: proxy upstream %q: %w", upstream, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pgtxtest: proxy listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		upstream: upstream,
		ln:       ln,
		ctx:      ctx,
		cancel:   cancel,
		conns:    make(map[*proxyConn]struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the host:port that clients dial to reach the proxy.
func (p *Proxy) Addr() string {
	return p.ln.Addr().String()
}

// DSN rewrites a postgres:// or postgresql:// URL so that it points at the
// proxy: the URL's host:port is replaced by Addr and any host, hostaddr or
// port query parameters, which would override it, are removed. Everything
// else (user, password, database, options) is kept. Keyword/value DSNs
// ("host=... port=...") are not supported and return an error.
func (p *Proxy) DSN(serverDSN string) (string, error) {
	u, err := url.Parse(serverDSN)
	if err != nil {
		return "", fmt.Errorf("pgtxtest: proxy DSN: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", fmt.Errorf("pgtxtest: proxy DSN: want a postgres:// URL, got scheme %q", u.Scheme)
	}
	u.Host = p.Addr()
	if q := u.Query(); q.Has("host") || q.Has("hostaddr") || q.Has("port") {
		q.Del("host")
		q.Del("hostaddr")
		q.Del("port")
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// Close stops the proxy: it closes the listener and every client and server
// connection, stalled ones included, then waits for all of the proxy's
// goroutines to return. Close is idempotent; later calls return the first
// call's result.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		p.mu.Lock()
		p.closed = true
		for _, r := range p.rules {
			r.dead = true
		}
		p.rules = nil
		conns := make([]*proxyConn, 0, len(p.conns))
		for pc := range p.conns {
			conns = append(conns, pc)
		}
		p.mu.Unlock()
		if err := p.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			p.closeErr = err
		}
		for _, pc := range conns {
			pc.closeHard()
		}
		p.wg.Wait()
	})
	return p.closeErr
}

// CutAfterForward arms a rule that forwards a statement matched by match to
// the server and then cuts both sides of that connection before any server
// reply to it reaches the client: the server receives the whole statement
// (and normally executes it — a COMMIT is applied), but the client only
// sees its connection close. A nil match matches every statement.
//
// The rule fires on the next n matching statements across all connections
// and then disarms; n <= 0 keeps it armed until Reset or Close.
//
// For a simple Query the cut follows the Query message. For the extended
// protocol the rule is checked at each Execute, against the SQL of the
// prepared statement behind the executed portal (as sent in its Parse
// message, so statements prepared earlier or cached by the driver match
// too); a Parse alone (e.g. preparing without executing) never fires it. On
// a match the proxy stops relaying server output at once and cuts right
// after forwarding the next Sync or Flush, the message that makes the
// server finish the work and send its results (an implicit transaction
// commits at Sync).
//
// After the cut the proxy half-closes the server socket (the server reads
// everything that was forwarded, then end of stream) and discards the
// server's output for up to a few seconds before closing it, so the server
// finishes the forwarded message rather than being reset mid-stream. pgx
// (pgconn) reacts to a broken connection by sending a CancelRequest for its
// backend on a new connection; the proxy holds such a cancel until the cut
// backend's socket is finished (normally when the backend exits after
// processing the forwarded statement), then forwards it. Without that hold
// the driver's reflexive cancel could interrupt the statement the proxy
// has just forwarded. Together these make the outcome deterministic: a
// forwarded COMMIT is applied.
func (p *Proxy) CutAfterForward(match func(sql string) bool, n int) {
	p.addRule(cutAfter, match, n)
}

// CutBeforeForward arms a rule that cuts both sides of the connection
// instead of forwarding a statement matched by match, so the server never
// sees it. A nil match matches every statement. Messages received before
// the matching one are forwarded first.
//
// The rule fires on the next n matching statements across all connections
// and then disarms; n <= 0 keeps it armed until Reset or Close.
//
// In the extended protocol the rule is checked at each Parse (the Parse is
// dropped) and at each Execute of a portal whose statement's SQL matches
// (the Execute is dropped), so re-executing a statement prepared earlier is
// cut as well. When a CutBeforeForward and a CutAfterForward rule both match
// a statement, the CutBeforeForward rule fires and the other stays armed.
func (p *Proxy) CutBeforeForward(match func(sql string) bool, n int) {
	p.addRule(cutBefore, match, n)
}

// CutOnCommit is shorthand for CutAfterForward(IsCommit, n): the next n
// COMMITs reach the server, but their clients see the connection die
// instead of the server's answer.
func (p *Proxy) CutOnCommit(n int) {
	p.CutAfterForward(IsCommit, n)
}

// CutOnCommitReply arms a rule that lets a COMMIT reach the server and run,
// relays everything the server sends before its answer, then drops the
// answer (CommandComplete "COMMIT") and cuts the connection: the transaction
// has committed and the client learns nothing of it. This is the ambiguous
// COMMIT whose resolution must say "committed". The rule fires on the next n
// such answers across all connections; n <= 0 keeps it armed.
func (p *Proxy) CutOnCommitReply(n int) {
	p.addRule(cutOnReply, nil, n)
}

// StallOnCommit arms a rule that simulates a network partition at a COMMIT:
// the next n COMMITs (as IsCommit tells) across all connections are not
// forwarded, and each connection that sent one is stalled from then on (see
// StallAll): the client gets no answer and the server's backend stays
// alive, idle in its transaction and holding its locks, until ReleaseStalled
// or Close. n <= 0 keeps the rule armed until Reset or Close.
//
// Statements are matched as CutBeforeForward matches them: a simple Query,
// and in the extended protocol each Parse (which is not forwarded) and each
// Execute of a portal whose statement is a COMMIT (not forwarded either,
// though the Bind before it has reached the server). Messages received
// before the matching one are forwarded first. A CutBeforeForward rule that
// matches the same statement fires instead; a CutAfterForward rule that
// matches it stays armed.
func (p *Proxy) StallOnCommit(n int) {
	p.addRule(stallCommit, IsCommit, n)
}

// StallAll stalls every current connection now, as a partition between the
// clients and the server would, and returns how many connections it
// stalled. Connections that were already stalled, or being cut or closed,
// are not counted.
//
// A stalled connection forwards nothing in either direction. What the
// server sends is read and discarded, so its backend never blocks on a full
// socket; what the client sends is read and discarded too. The proxy keeps
// both sockets open whatever either peer does: the client closing its side
// does not reach the server, and the server closing its side does not reach
// the client. Neither CutAll nor a rule cuts a stalled connection and Reset
// leaves it stalled; only ReleaseStalled and Close end it. A CancelRequest
// aimed at a stalled backend is held until its connection is released, then
// forwarded.
func (p *Proxy) StallAll() int {
	n := 0
	for _, pc := range p.snapshot() {
		if pc.stall() {
			n++
		}
	}
	return n
}

// ReleaseStalled ends every stalled connection, closing its server side (so
// the backend sees end of stream, rolls back and exits) and its client side,
// and returns how many connections it ended.
func (p *Proxy) ReleaseStalled() int {
	n := 0
	for _, pc := range p.snapshot() {
		if pc.release() {
			n++
		}
	}
	return n
}

// RefuseNew sets whether new client connections are refused. While on,
// connections are accepted and closed at once, so the client sees end of
// stream or a reset while connecting; established connections are not
// affected.
func (p *Proxy) RefuseNew(on bool) {
	p.refuse.Store(on)
}

// SetLatency makes the proxy hold every client→server message until d has
// passed since it arrived, like a one-way network delay: messages that
// arrive together (a pipelined batch) are released together, so each round
// trip gets at least d longer. Zero or a negative d removes the delay. It
// applies to connections of every type; see SetConnLatency for one type.
func (p *Proxy) SetLatency(d time.Duration) {
	p.latency.Store(int64(max(d, 0)))
}

// ConnType is the kind of a proxied connection, known from the first packet
// its client sends after any encryption request.
type ConnType int

// The connection types.
const (
	ConnSession       ConnType = iota + 1 // a normal session (startup packet)
	ConnCancelRequest                     // a CancelRequest connection
)

// numConnTypes is the size of a table indexed by ConnType.
const numConnTypes = int(ConnCancelRequest) + 1

// String returns the type's name.
func (c ConnType) String() string {
	switch c {
	case ConnSession:
		return "session"
	case ConnCancelRequest:
		return "cancel request"
	}
	return fmt.Sprintf("ConnType(%d)", int(c))
}

// SetConnLatency makes the proxy hold what clients of connections of type c
// send for d (as SetLatency does for all); d <= 0 removes it. SetLatency
// keeps working and applies to every type; when both are set the larger
// wins. An unknown type is ignored.
//
// For ConnSession, the startup packet and every later message are held, so
// connecting and every round trip take at least d longer. For
// ConnCancelRequest, the whole CancelRequest packet is held until d has
// passed since it arrived before it is forwarded to the server (after any
// hold for a cut backend, see CutAfterForward), so a driver waiting for the
// server to close the cancel connection, as pgx's CancelRequest does, waits
// at least d. A change applies to the messages the proxy has not yet begun
// to hold; one already held keeps the delay it got.
func (p *Proxy) SetConnLatency(c ConnType, d time.Duration) {
	if c < ConnSession || int(c) >= numConnTypes {
		return
	}
	p.typeLatency[c].Store(int64(max(d, 0)))
}

// latencyFor returns how long the proxy holds what a client of a connection
// of type c sends: the larger of the latency for all and the one for c.
func (p *Proxy) latencyFor(c ConnType) time.Duration {
	d := p.latency.Load()
	if c >= ConnSession && int(c) < numConnTypes {
		d = max(d, p.typeLatency[c].Load())
	}
	return time.Duration(d)
}

// CutAll cuts every current connection now, exactly as a fault rule would,
// and returns how many connections it cut. Connections that were already
// being cut or closed, and stalled connections, are not counted.
func (p *Proxy) CutAll() int {
	n := 0
	for _, pc := range p.snapshot() {
		if pc.cut(&p.cutsAll) {
			n++
		}
	}
	return n
}

// snapshot returns the current connections.
func (p *Proxy) snapshot() []*proxyConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	return conns
}

// Reset disarms every fault rule (StallOnCommit included), stops failing
// COMMITs (as StopFailing does) and slowing statements (SlowStatements),
// removes any latency (of every connection type too) and stops refusing new
// connections. Counters and connections are left alone: stalled connections
// stay stalled until ReleaseStalled or Close.
func (p *Proxy) Reset() {
	p.mu.Lock()
	for _, r := range p.rules {
		r.dead = true
	}
	p.rules = nil
	p.stopFailingLocked()
	p.slowRules = nil
	p.slowOn.Store(false)
	p.mu.Unlock()
	p.latency.Store(0)
	for i := range p.typeLatency {
		p.typeLatency[i].Store(0)
	}
	p.refuse.Store(false)
}

// Stats returns a snapshot of the proxy's counters.
func (p *Proxy) Stats() ProxyStats {
	return ProxyStats{
		Accepted:          p.accepted.Load(),
		Refused:           p.refused.Load(),
		Active:            p.active.Load(),
		CutsAfterForward:  p.cutsAfter.Load(),
		CutsBeforeForward: p.cutsBefore.Load(),
		CutsAll:           p.cutsAll.Load(),
		CutsOnCommitReply: p.cutsOnReply.Load(),
		Stalls:            p.stalls.Load(),
		Statements:        p.statements.Load(),
		InjectedFailures:  p.injected.Load(),
		SlowedStatements:  p.slowed.Load(),
	}
}

// acceptLoop accepts client connections until the listener is closed.
func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure such as running out of file descriptors:
			// back off briefly instead of spinning.
			t := time.NewTimer(10 * time.Millisecond)
			select {
			case <-p.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		if p.refuse.Load() {
			p.refused.Add(1)
			_ = c.Close()
			continue
		}
		pc := &proxyConn{
			p:           p,
			client:      c,
			done:        make(chan struct{}),
			finished:    make(chan struct{}),
			clientEnded: make(chan struct{}),
			stmts:       make(map[string]string),
			portals:     make(map[string]portal),
		}
		pc.txStatus.Store('I')
		pc.sr = &stampReader{r: c}
		pc.br = bufio.NewReaderSize(pc.sr, 32<<10)
		if !p.register(pc) {
			_ = c.Close()
			return
		}
		p.wg.Add(1)
		go pc.run()
	}
}

// register adds pc to the live connections unless the proxy is closed.
func (p *Proxy) register(pc *proxyConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[pc] = struct{}{}
	p.accepted.Add(1)
	p.active.Add(1)
	return true
}

// unregister removes pc from the live connections.
func (p *Proxy) unregister(pc *proxyConn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
	p.active.Add(-1)
}
