package faultproxy

import (
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
	errRejected   = errors.New("pgtxtest proxy: connection rejected (RejectNew)")
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
	reject      atomic.Pointer[string] // RejectNew's code; nil: off

	tb testing.TB // the test of a proxy from New, which a refused argument fails

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

	accepted, refused, rejected    atomic.Int64
	active                         atomic.Int64
	cutsAfter, cutsBefore, cutsAll atomic.Int64
	cutsOnReply                    atomic.Int64
	stalls                         atomic.Int64
	statements                     atomic.Int64
	injected, slowed               atomic.Int64
}

// Stats is a snapshot of a Proxy's counters, as returned by Stats.
type Stats struct {
	// Accepted counts client connections accepted and proxied, including
	// CancelRequest connections but not connections refused by RefuseNew.
	Accepted int64
	// Refused counts client connections closed at once because RefuseNew
	// was on.
	Refused int64
	// Rejected counts client connections answered with RejectNew's error.
	Rejected int64
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

// New starts a Proxy that listens on 127.0.0.1 on a free port and
// forwards to upstream (host:port). It fails tb if the proxy cannot start
// and closes the proxy in tb.Cleanup, which ends all of its goroutines.
func New(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	p, err := Start(upstream)
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

// Start is like New without a testing.TB, for example programs
// and chaos tools. The caller must call Close.
func Start(upstream string) (*Proxy, error) {
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

// Reset disarms every fault rule (StallOnCommit included), stops failing
// COMMITs (as StopFailing does) and slowing statements (SlowStatements),
// removes any latency (of every connection type too) and stops refusing
// (RefuseNew) and rejecting (RejectNew) new connections. Counters and connections are left alone: stalled connections
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
	p.reject.Store(nil)
}

// Stats returns a snapshot of the proxy's counters.
func (p *Proxy) Stats() Stats {
	return Stats{
		Accepted:          p.accepted.Load(),
		Refused:           p.refused.Load(),
		Rejected:          p.rejected.Load(),
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

// Upstream returns the host:port the proxy forwards to.
func (p *Proxy) Upstream() string { return p.upstream }
