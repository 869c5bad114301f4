package pgtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
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
	errMalformed  = errors.New("pgtest proxy: malformed client message")
	errClientGone = errors.New("pgtest proxy: client closed the connection")
	errServerGone = errors.New("pgtest proxy: server connection failed")
	errCut        = errors.New("pgtest proxy: connection cut")
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
// with that backend's socket (see CutAfterForward).
//
// Fault rules (CutAfterForward, CutBeforeForward, CutOnCommit) are shared by
// all connections. Statements are matched on the text of a simple Query
// message, or on the SQL of the Parse message that created an
// extended-protocol statement; see CutAfterForward and CutBeforeForward for
// exactly when an extended-protocol statement fires a rule.
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

	latency atomic.Int64 // time.Duration added to every client→server message
	refuse  atomic.Bool

	mu     sync.Mutex
	closed bool
	conns  map[*proxyConn]struct{}
	rules  []*rule

	accepted, refused, active      atomic.Int64
	cutsAfter, cutsBefore, cutsAll atomic.Int64
	cutsOnReply                    atomic.Int64
	statements                     atomic.Int64
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
	// lets the server finish reading it.
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
	// Statements counts simple-protocol Query messages plus
	// extended-protocol Parse messages seen from clients.
	Statements int64
}

// NewProxy starts a Proxy that listens on 127.0.0.1 on a free port and
// forwards to upstream (host:port). It fails tb if the proxy cannot start
// and closes the proxy in tb.Cleanup, which ends all of its goroutines.
func NewProxy(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	p, err := StartProxy(upstream)
	if err != nil {
		tb.Fatalf("pgtest: start proxy: %v", err)
	}
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Errorf("pgtest: close proxy: %v", err)
		}
	})
	return p
}

// StartProxy is like NewProxy without a testing.TB, for example programs
// and chaos tools. The caller must call Close.
func StartProxy(upstream string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		return nil, fmt.Errorf("pgtest: proxy upstream %q: %w", upstream, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pgtest: proxy listen: %w", err)
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
		return "", fmt.Errorf("pgtest: proxy DSN: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", fmt.Errorf("pgtest: proxy DSN: want a postgres:// URL, got scheme %q", u.Scheme)
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
// connection, then waits for all of the proxy's goroutines to return. Close
// is idempotent; later calls return the first call's result.
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
// trip gets at least d longer. Zero or a negative d removes the delay.
func (p *Proxy) SetLatency(d time.Duration) {
	p.latency.Store(int64(max(d, 0)))
}

// CutAll cuts every current connection now, exactly as a fault rule would,
// and returns how many connections it cut. Connections that were already
// being cut or closed are not counted.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	p.mu.Unlock()
	n := 0
	for _, pc := range conns {
		if pc.cut(&p.cutsAll) {
			n++
		}
	}
	return n
}

// Reset disarms every fault rule, removes any latency and stops refusing
// new connections. Counters and connections are left alone.
func (p *Proxy) Reset() {
	p.mu.Lock()
	for _, r := range p.rules {
		r.dead = true
	}
	p.rules = nil
	p.mu.Unlock()
	p.latency.Store(0)
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
		Statements:        p.statements.Load(),
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
			p:        p,
			client:   c,
			done:     make(chan struct{}),
			finished: make(chan struct{}),
			stmts:    make(map[string]string),
			portals:  make(map[string]string),
		}
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

// stampReader records when its last read returned data, which is when the
// bytes it returned arrived from the client.
type stampReader struct {
	r    io.Reader
	last time.Time
}

// Read implements io.Reader.
func (s *stampReader) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	if n > 0 {
		s.last = time.Now()
	}
	return n, err
}

// proxyConn is one proxied client connection. Its run goroutine pumps
// client→server messages; its relay goroutine copies server→client bytes.
type proxyConn struct {
	p      *Proxy
	client net.Conn
	done   chan struct{} // closed when the connection is cut or closed
	muted  atomic.Bool   // drop server→client bytes from now on

	finished chan struct{} // closed when run has fully finished with both sockets

	mu         sync.Mutex
	server     net.Conn // nil until dialled
	ending     bool     // cut, or the client went away; the server is being drained
	wasCut     bool     // the proxy cut this connection (a rule or CutAll)
	closed     bool     // both sockets closed
	backendKey string   // BackendKeyData body (process ID and secret key)
	doneOnce   sync.Once

	// Owned by the run goroutine.
	sr           *stampReader
	br           *bufio.Reader // client reads
	bw           *bufio.Writer // server writes; nil until dialled
	relayDone    chan struct{} // nil until the relay starts
	stmts        map[string]string
	portals      map[string]string
	cutAfterSync bool // an Execute matched a CutAfterForward rule
}

// run serves the connection and cleans up after it.
func (pc *proxyConn) run() {
	defer pc.p.wg.Done()
	defer pc.p.unregister(pc)
	err := pc.serve()
	switch {
	case errors.Is(err, errCut):
		// Already cut; the relay drains the server.
	case errors.Is(err, errMalformed):
		pc.closeHard()
	case errors.Is(err, errServerGone):
		// Let the relay pass on whatever the server said last.
		pc.mu.Lock()
		if s := pc.server; s != nil {
			_ = s.SetReadDeadline(time.Now().Add(drainTimeout))
		}
		pc.mu.Unlock()
	default:
		pc.clientGone()
	}
	if pc.relayDone != nil {
		<-pc.relayDone
	}
	pc.closeHard()
	close(pc.finished)
}

// serve handles the startup phase, dials the server and pumps messages.
func (pc *proxyConn) serve() error {
	startup, err := pc.negotiate()
	if err != nil {
		return err
	}
	if binary.BigEndian.Uint32(startup[4:8]) == cancelRequestCode {
		if err := pc.holdCancel(string(startup[8:])); err != nil {
			return err
		}
	}
	if err := pc.delay(pc.sr.last); err != nil {
		return err
	}
	if err := pc.dial(); err != nil {
		return err
	}
	if err := pc.write(startup); err != nil {
		return err
	}
	if err := pc.bw.Flush(); err != nil {
		return fmt.Errorf("%w: %v", errServerGone, err)
	}
	if binary.BigEndian.Uint32(startup[4:8]) == cancelRequestCode {
		return pc.copyRaw()
	}
	return pc.pump()
}

// negotiate answers encryption requests with 'N' and returns the first
// StartupMessage or CancelRequest packet, validated.
func (pc *proxyConn) negotiate() ([]byte, error) {
	for i := 0; ; i++ {
		pkt, err := pc.readStartup()
		if err != nil {
			return nil, err
		}
		code := binary.BigEndian.Uint32(pkt[4:8])
		switch {
		case code == sslRequestCode || code == gssEncRequestCode:
			if len(pkt) != 8 || i >= maxNegotiations {
				return nil, fmt.Errorf("%w: bad encryption request", errMalformed)
			}
			if _, err := pc.client.Write([]byte{'N'}); err != nil {
				return nil, fmt.Errorf("%w: %v", errClientGone, err)
			}
		case code == cancelRequestCode:
			var m pgproto3.CancelRequest
			if err := m.Decode(pkt[4:]); err != nil {
				return nil, fmt.Errorf("%w: %v", errMalformed, err)
			}
			return pkt, nil
		case code>>16 == 3:
			if code == pgproto3.ProtocolVersion30 || code == pgproto3.ProtocolVersion32 {
				var m pgproto3.StartupMessage
				if err := m.Decode(pkt[4:]); err != nil {
					return nil, fmt.Errorf("%w: %v", errMalformed, err)
				}
			} else if pkt[len(pkt)-1] != 0 {
				// Other 3.x minor versions are left to the server to
				// negotiate; check only the terminator.
				return nil, fmt.Errorf("%w: unterminated startup message", errMalformed)
			}
			return pkt, nil
		default:
			return nil, fmt.Errorf("%w: unknown startup code %d", errMalformed, code)
		}
	}
}

// holdCancel delays a CancelRequest for the backend identified by key (its
// process ID and secret key) while the proxy is still finishing a
// connection to that backend which it has cut. Drivers such as pgx send a
// CancelRequest by themselves when their connection breaks; holding it lets
// the server finish the statement the proxy forwarded before the cut,
// instead of racing the driver's cancel. The wait is bounded by the cut
// connection's drain (drainTimeout).
func (pc *proxyConn) holdCancel(key string) error {
	finished := pc.p.cutBackend(key)
	if finished == nil {
		return nil
	}
	select {
	case <-finished:
		return nil
	case <-pc.done:
		return errCut
	case <-pc.p.ctx.Done():
		return errCut
	}
}

// cutBackend returns the finished channel of a connection that the proxy
// cut and whose backend has the given key, or nil if there is none.
func (p *Proxy) cutBackend(key string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pc := range p.conns {
		pc.mu.Lock()
		match := pc.wasCut && pc.backendKey == key
		pc.mu.Unlock()
		if match {
			return pc.finished
		}
	}
	return nil
}

// readStartup reads one length-prefixed startup-phase packet.
func (pc *proxyConn) readStartup() ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(pc.br, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: %v", errClientGone, err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 8 || n > maxStartupLen {
		return nil, fmt.Errorf("%w: startup packet length %d", errMalformed, n)
	}
	pkt := make([]byte, n)
	copy(pkt, hdr[:])
	if _, err := io.ReadFull(pc.br, pkt[4:]); err != nil {
		return nil, fmt.Errorf("%w: %v", errClientGone, err)
	}
	return pkt, nil
}

// dial connects to the upstream server and starts the relay.
func (pc *proxyConn) dial() error {
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.DialContext(pc.p.ctx, "tcp", pc.p.upstream)
	if err != nil {
		return fmt.Errorf("%w: dial %s: %v", errServerGone, pc.p.upstream, err)
	}
	pc.mu.Lock()
	if pc.ending || pc.closed {
		pc.mu.Unlock()
		_ = server.Close()
		return errCut
	}
	pc.server = server
	pc.mu.Unlock()
	pc.bw = bufio.NewWriterSize(server, 32<<10)
	pc.relayDone = make(chan struct{})
	pc.p.wg.Add(1)
	go pc.relay(server)
	return nil
}

// copyRaw copies client bytes to the server unparsed (after a
// CancelRequest, when the client should send nothing more).
func (pc *proxyConn) copyRaw() error {
	buf := make([]byte, 4096)
	for {
		n, err := pc.br.Read(buf)
		if n > 0 {
			if err := pc.write(buf[:n]); err != nil {
				return err
			}
			if err := pc.bw.Flush(); err != nil {
				return fmt.Errorf("%w: %v", errServerGone, err)
			}
		}
		if err != nil {
			return fmt.Errorf("%w: %v", errClientGone, err)
		}
	}
}

// pump forwards regular (post-startup) client messages, applying faults.
func (pc *proxyConn) pump() error {
	for {
		peek, err := pc.br.Peek(5)
		if err != nil {
			return fmt.Errorf("%w: %v", errClientGone, err)
		}
		arrival := pc.sr.last
		var hdr [5]byte
		copy(hdr[:], peek)
		_, _ = pc.br.Discard(5)
		typ := hdr[0]
		n := int32(binary.BigEndian.Uint32(hdr[1:]))
		if n < 4 || n > maxMessageLen {
			return fmt.Errorf("%w: message %q length %d", errMalformed, typ, n)
		}
		if err := pc.delay(arrival); err != nil {
			return err
		}
		bodyLen := int(n) - 4
		switch typ {
		case 'Q', 'P', 'B', 'E', 'C':
			body, err := pc.readBody(bodyLen)
			if err != nil {
				return err
			}
			if err := pc.inspect(typ, hdr[:], body); err != nil {
				return err
			}
		default:
			if err := pc.write(hdr[:]); err != nil {
				return err
			}
			if err := pc.stream(bodyLen); err != nil {
				return err
			}
			if (typ == 'S' || typ == 'H') && pc.cutAfterSync {
				return pc.cutNow(cutAfter)
			}
		}
		if pc.br.Buffered() == 0 {
			if err := pc.bw.Flush(); err != nil {
				return fmt.Errorf("%w: %v", errServerGone, err)
			}
		}
	}
}

// inspect decodes a statement-related message, applies the fault rules and
// forwards it (unless cut before forwarding).
func (pc *proxyConn) inspect(typ byte, hdr, body []byte) error {
	p := pc.p
	after := false
	switch typ {
	case 'Q':
		var m pgproto3.Query
		if err := m.Decode(body); err != nil {
			return fmt.Errorf("%w: %v", errMalformed, err)
		}
		p.statements.Add(1)
		// A simple Query destroys the unnamed statement and portal.
		delete(pc.stmts, "")
		delete(pc.portals, "")
		if p.fire(cutBefore, m.String) {
			return pc.cutNow(cutBefore)
		}
		if p.fire(cutAfter, m.String) {
			after = true
			pc.muted.Store(true) // before the server can possibly answer
		}
	case 'P':
		var m pgproto3.Parse
		if err := m.Decode(body); err != nil {
			return fmt.Errorf("%w: %v", errMalformed, err)
		}
		p.statements.Add(1)
		if p.fire(cutBefore, m.Query) {
			return pc.cutNow(cutBefore)
		}
		pc.stmts[m.Name] = m.Query
	case 'B':
		// Only the portal and statement names are needed; decoding the
		// whole Bind would copy every parameter value.
		portal, rest, ok := cstring(body)
		stmt, _, ok2 := cstring(rest)
		if !ok || !ok2 {
			return fmt.Errorf("%w: bad Bind", errMalformed)
		}
		if sql, ok := pc.stmts[stmt]; ok {
			pc.portals[portal] = sql
		} else {
			delete(pc.portals, portal)
		}
	case 'E':
		var m pgproto3.Execute
		if err := m.Decode(body); err != nil {
			return fmt.Errorf("%w: %v", errMalformed, err)
		}
		if sql, ok := pc.portals[m.Portal]; ok {
			if p.fire(cutBefore, sql) {
				return pc.cutNow(cutBefore)
			}
			if !pc.cutAfterSync && p.fire(cutAfter, sql) {
				pc.cutAfterSync = true
				pc.muted.Store(true) // before the server can possibly answer
			}
		}
	case 'C':
		var m pgproto3.Close
		if err := m.Decode(body); err != nil {
			return fmt.Errorf("%w: %v", errMalformed, err)
		}
		switch m.ObjectType {
		case 'S':
			delete(pc.stmts, m.Name)
		case 'P':
			delete(pc.portals, m.Name)
		}
	}
	if err := pc.write(hdr); err != nil {
		return err
	}
	if err := pc.write(body); err != nil {
		return err
	}
	if after {
		return pc.cutNow(cutAfter)
	}
	return nil
}

// cutNow flushes what was forwarded so far, cuts the connection and counts
// the cut under kind. It always returns errCut.
func (pc *proxyConn) cutNow(kind ruleKind) error {
	_ = pc.bw.Flush() // if this fails the server is gone anyway
	counter := &pc.p.cutsAfter
	if kind == cutBefore {
		counter = &pc.p.cutsBefore
	}
	pc.cut(counter)
	return errCut
}

// readBody reads a message body of n bytes. Small bodies are read into one
// buffer; larger ones grow with the bytes actually received.
func (pc *proxyConn) readBody(n int) ([]byte, error) {
	if n <= inspectInline {
		b := make([]byte, n)
		if _, err := io.ReadFull(pc.br, b); err != nil {
			return nil, fmt.Errorf("%w: %v", errClientGone, err)
		}
		return b, nil
	}
	var buf bytes.Buffer
	buf.Grow(inspectInline)
	if _, err := io.CopyN(&buf, pc.br, int64(n)); err != nil {
		return nil, fmt.Errorf("%w: %v", errClientGone, err)
	}
	return buf.Bytes(), nil
}

// stream copies the next n bytes from the client to the server as they
// arrive, without holding the whole message.
func (pc *proxyConn) stream(n int) error {
	for n > 0 {
		k := min(n, pc.br.Buffered())
		if k == 0 {
			if _, err := pc.br.Peek(1); err != nil {
				return fmt.Errorf("%w: %v", errClientGone, err)
			}
			continue
		}
		chunk, _ := pc.br.Peek(k)
		if err := pc.write(chunk); err != nil {
			return err
		}
		_, _ = pc.br.Discard(k)
		n -= k
	}
	return nil
}

// write buffers b for the server.
func (pc *proxyConn) write(b []byte) error {
	if _, err := pc.bw.Write(b); err != nil {
		return fmt.Errorf("%w: %v", errServerGone, err)
	}
	return nil
}

// delay waits until the configured latency has passed since arrival,
// flushing earlier messages first so they are not held back.
func (pc *proxyConn) delay(arrival time.Time) error {
	d := time.Duration(pc.p.latency.Load())
	if d <= 0 {
		return nil
	}
	wait := time.Until(arrival.Add(d))
	if wait <= 0 {
		return nil
	}
	if pc.bw != nil {
		if err := pc.bw.Flush(); err != nil {
			return fmt.Errorf("%w: %v", errServerGone, err)
		}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-pc.done:
		return errCut
	case <-pc.p.ctx.Done():
		return errCut
	}
}

// relay copies server bytes to the client until the server side ends, then
// closes both sockets. Until the first ReadyForQuery it follows the
// server's message framing to learn the backend's BackendKeyData (see
// holdCancel); after that it copies raw bytes.
func (pc *proxyConn) relay(server net.Conn) {
	defer pc.p.wg.Done()
	defer close(pc.relayDone)
	defer func() {
		_ = server.Close()
		_ = pc.client.Close()
	}()
	sbr := bufio.NewReaderSize(server, 32<<10)
	if !pc.relayStartup(sbr) {
		return
	}
	pc.relayMessages(sbr)
}

// relayMessages forwards framed server messages until the server side ends.
// It reads whole only the small CommandComplete messages, to let a
// CutOnCommitReply rule drop a COMMIT's answer; everything else is streamed.
func (pc *proxyConn) relayMessages(sbr *bufio.Reader) {
	buf := make([]byte, 32<<10)
	for {
		hdr, err := sbr.Peek(5)
		if err != nil {
			pc.toClient(hdr)
			return
		}
		typ := hdr[0]
		n := int(int32(binary.BigEndian.Uint32(hdr[1:])))
		if n < 4 {
			pc.relayRaw(sbr, buf) // not framing we understand: pass bytes on
			return
		}
		if typ == 'C' && n <= 64 {
			m := make([]byte, 1+n)
			if k, err := io.ReadFull(sbr, m); err != nil {
				pc.toClient(m[:k])
				return
			}
			if tag, _, _ := cstring(m[5:]); tag == "COMMIT" && pc.p.fire(cutOnReply, tag) {
				pc.cut(&pc.p.cutsOnReply) // the answer is dropped; the relay drains the server
				continue
			}
			pc.toClient(m)
			continue
		}
		for left := 1 + n; left > 0; {
			k, err := sbr.Read(buf[:min(left, len(buf))])
			pc.toClient(buf[:k])
			if err != nil {
				return
			}
			left -= k
		}
	}
}

// relayRaw copies server bytes to the client until the server side ends.
func (pc *proxyConn) relayRaw(sbr *bufio.Reader, buf []byte) {
	for {
		n, err := sbr.Read(buf)
		pc.toClient(buf[:n])
		if err != nil {
			return
		}
	}
}

// relayStartup forwards framed server messages up to and including the
// first ReadyForQuery, recording BackendKeyData. It reports false when the
// server side has ended, and stops following the framing early (reporting
// true) if a message is implausibly large for the startup phase.
func (pc *proxyConn) relayStartup(sbr *bufio.Reader) bool {
	for {
		hdr, err := sbr.Peek(5)
		if err != nil {
			pc.toClient(hdr)
			return false
		}
		typ := hdr[0]
		n := int(int32(binary.BigEndian.Uint32(hdr[1:])))
		if n < 4 || n > inspectInline {
			return true
		}
		m := make([]byte, 1+n)
		if k, err := io.ReadFull(sbr, m); err != nil {
			pc.toClient(m[:k])
			return false
		}
		if typ == 'K' {
			pc.mu.Lock()
			pc.backendKey = string(m[5:])
			pc.mu.Unlock()
		}
		pc.toClient(m)
		if typ == 'Z' {
			return true
		}
	}
}

// toClient writes server bytes to the client unless the connection is
// muted. If the client is gone the server is left to drain.
func (pc *proxyConn) toClient(b []byte) {
	if len(b) == 0 || pc.muted.Load() {
		return
	}
	if _, err := pc.client.Write(b); err != nil {
		pc.clientGone()
		pc.muted.Store(true)
	}
}

// cut closes the client at once, stops relaying server output and
// half-closes the server socket, leaving the relay to drain the server for
// at most drainTimeout. It reports whether this call did the cut, and if so
// increments counter before the client can observe the cut.
func (pc *proxyConn) cut(counter *atomic.Int64) bool {
	pc.mu.Lock()
	if pc.ending || pc.closed {
		pc.mu.Unlock()
		return false
	}
	pc.ending = true
	pc.wasCut = true
	pc.muted.Store(true)
	counter.Add(1)
	server := pc.server
	pc.mu.Unlock()
	pc.doneOnce.Do(func() { close(pc.done) })
	_ = pc.client.Close()
	if server != nil {
		drain(server)
	}
	return true
}

// clientGone handles the client closing its side: the server sees end of
// stream after everything already forwarded, while the relay keeps passing
// on what the server still sends, for at most drainTimeout.
func (pc *proxyConn) clientGone() {
	pc.mu.Lock()
	if pc.ending || pc.closed {
		pc.mu.Unlock()
		return
	}
	pc.ending = true
	server := pc.server
	pc.mu.Unlock()
	if server == nil {
		_ = pc.client.Close()
		return
	}
	drain(server)
}

// drain half-closes server and bounds how long it may still be read.
func drain(server net.Conn) {
	if tc, ok := server.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		_ = server.Close()
	}
	_ = server.SetReadDeadline(time.Now().Add(drainTimeout))
}

// closeHard closes both sockets now.
func (pc *proxyConn) closeHard() {
	pc.mu.Lock()
	pc.closed = true
	pc.muted.Store(true)
	server := pc.server
	pc.mu.Unlock()
	pc.doneOnce.Do(func() { close(pc.done) })
	_ = pc.client.Close()
	if server != nil {
		_ = server.Close()
	}
}

// cstring splits a NUL-terminated string off the front of b.
func cstring(b []byte) (s string, rest []byte, ok bool) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), b[i+1:], true
		}
	}
	return "", nil, false
}
