package pgtxtest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

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
	// stalled is set, under mu, when the connection is stalled (see
	// StallAll); it is read without mu where a stale answer only delays the
	// stall by one message.
	stalled atomic.Bool

	// txStatus is the transaction status of the server's last ReadyForQuery
	// ('I', 'T' or 'E'), set by the relay.
	txStatus atomic.Uint32
	inj      injections // failed COMMITs whose answers the relay rewrites

	finished    chan struct{} // closed when run has fully finished with both sockets
	clientEnded chan struct{} // closed when a stalled connection's client side has ended

	mu         sync.Mutex
	server     net.Conn // nil until dialled
	ending     bool     // cut, or the client went away; the server is being drained
	wasCut     bool     // the proxy cut this connection (a rule or CutAll)
	closed     bool     // both sockets closed
	pumpDone   bool     // serve has returned: the connection is ending, it cannot be stalled
	relayEnded bool     // the server side has ended: the connection cannot be stalled
	backendKey string   // BackendKeyData body (process ID and secret key)
	doneOnce   sync.Once

	// Owned by the run goroutine.
	connType     ConnType // set when the first startup packet has been read
	sr           *stampReader
	br           *bufio.Reader // client reads
	bw           *bufio.Writer // server writes; nil until dialled
	relayDone    chan struct{} // nil until the relay starts
	stmts        map[string]string
	portals      map[string]portal
	cutAfterSync bool // an Execute matched a CutAfterForward rule
	// fp hashes what the current transaction executed, for
	// FailEveryCommitOnce; nil until first needed.
	fp hash.Hash
	// rollbackAtSync: an extended-protocol COMMIT was failed, and the
	// ROLLBACK that ends its transaction goes after the client's Sync.
	rollbackAtSync bool
}

// portal is what the proxy knows of a bound portal.
type portal struct {
	sql    string            // the SQL of its statement
	digest [sha256.Size]byte // its SQL and bound parameters, when fingerprinting
}

// run serves the connection and cleans up after it.
func (pc *proxyConn) run() {
	defer pc.p.wg.Done()
	defer pc.p.unregister(pc)
	err := pc.serve()
	pc.mu.Lock()
	pc.pumpDone = true
	stalled := pc.stalled.Load()
	pc.mu.Unlock()
	switch {
	case stalled:
		// Whatever made serve return (the stall itself, the client leaving
		// or sending garbage), the server must not notice.
		pc.awaitRelease()
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

// awaitRelease holds a stalled connection until ReleaseStalled or Close ends
// it. It reads and discards what the client still sends, so that the client
// closing its side is noticed (clientEnded) but never passed on, and a
// client that keeps writing is not blocked by a full socket.
func (pc *proxyConn) awaitRelease() {
	_, _ = io.Copy(io.Discard, pc.br)
	close(pc.clientEnded)
	<-pc.done
}

// serve handles the startup phase, dials the server and pumps messages.
func (pc *proxyConn) serve() error {
	startup, err := pc.negotiate()
	if err != nil {
		return err
	}
	pc.connType = ConnSession
	if binary.BigEndian.Uint32(startup[4:8]) == cancelRequestCode {
		pc.connType = ConnCancelRequest
		if err := pc.holdCancel(string(startup[8:])); err != nil {
			return err
		}
	}
	// Hold the packet as one message, from when its last bytes arrived.
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
			if pc.stalled.Load() {
				return nil, errStalled // the proxy's own answer must not get through either
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
// connection to that backend which it has cut, or while that connection is
// stalled. Drivers such as pgx send a CancelRequest by themselves when their
// connection breaks or times out; holding it lets the server finish the
// statement the proxy forwarded before a cut, instead of racing the
// driver's cancel, and keeps a stalled backend as undisturbed as a real
// partition would. The wait is bounded by the cut connection's drain
// (drainTimeout), or for a stalled one by ReleaseStalled and Close.
func (pc *proxyConn) holdCancel(key string) error {
	finished := pc.p.heldBackend(key)
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

// heldBackend returns the finished channel of a connection that the proxy
// cut or stalled and whose backend has the given key, or nil if there is
// none.
func (p *Proxy) heldBackend(key string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pc := range p.conns {
		pc.mu.Lock()
		match := (pc.wasCut || pc.stalled.Load()) && pc.backendKey == key
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
	if pc.ending || pc.closed || pc.stalled.Load() {
		// A stalled connection's startup never reached the server, so
		// the server must not see a connection at all.
		pc.mu.Unlock()
		_ = server.Close()
		return errCut
	}
	pc.server = server
	pc.mu.Unlock()
	pc.bw = bufio.NewWriterSize(stallGate{pc: pc, w: server}, 32<<10)
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
		if pc.stalled.Load() {
			return errStalled // the message is left for awaitRelease to discard
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
			if typ == 'S' && pc.rollbackAtSync {
				pc.rollbackAtSync = false
				if err := pc.write(rollbackQuery); err != nil {
					return err
				}
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
// forwards it (unless cut before forwarding, stalled, or replaced by a failed
// COMMIT).
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
		if err := pc.slow(m.String); err != nil {
			return err
		}
		if pc.fire(cutBefore, m.String) {
			return pc.cutNow(cutBefore)
		}
		if pc.fire(stallCommit, m.String) {
			return pc.stallNow()
		}
		if pc.fire(cutAfter, m.String) {
			after = true
			pc.muted.Store(true) // before the server can possibly answer
		}
		kind := statementKind(m.String)
		if !after && pc.failCommit(kind, false) {
			return nil
		}
		pc.track(kind, 'Q', []byte(m.String))
	case 'P':
		var m pgproto3.Parse
		if err := m.Decode(body); err != nil {
			return fmt.Errorf("%w: %v", errMalformed, err)
		}
		p.statements.Add(1)
		if pc.fire(cutBefore, m.Query) {
			return pc.cutNow(cutBefore)
		}
		if pc.fire(stallCommit, m.Query) {
			return pc.stallNow()
		}
		pc.stmts[m.Name] = m.Query
	case 'B':
		// Only the portal and statement names are needed; decoding the
		// whole Bind would copy every parameter value.
		name, rest, ok := cstring(body)
		stmt, params, ok2 := cstring(rest)
		if !ok || !ok2 {
			return fmt.Errorf("%w: bad Bind", errMalformed)
		}
		if sql, ok := pc.stmts[stmt]; ok {
			pt := portal{sql: sql}
			if p.everyOn.Load() {
				h := sha256.New()
				h.Write([]byte(sql))
				h.Write([]byte{0})
				h.Write(params)
				h.Sum(pt.digest[:0])
			}
			pc.portals[name] = pt
		} else {
			delete(pc.portals, name)
		}
	case 'E':
		var m pgproto3.Execute
		if err := m.Decode(body); err != nil {
			return fmt.Errorf("%w: %v", errMalformed, err)
		}
		if pt, ok := pc.portals[m.Portal]; ok {
			if err := pc.slow(pt.sql); err != nil {
				return err
			}
			if pc.fire(cutBefore, pt.sql) {
				return pc.cutNow(cutBefore)
			}
			if pc.fire(stallCommit, pt.sql) {
				return pc.stallNow()
			}
			if !pc.cutAfterSync && pc.fire(cutAfter, pt.sql) {
				pc.cutAfterSync = true
				pc.muted.Store(true) // before the server can possibly answer
			}
			kind := statementKind(pt.sql)
			if !pc.cutAfterSync && pc.failCommit(kind, true) {
				return nil
			}
			pc.track(kind, 'E', pt.digest[:])
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

// track updates the fingerprint of the current transaction with a statement
// of the given kind, executed as typ ('Q' with its SQL, 'E' with its portal's
// digest): BEGIN starts a new one, the end of a transaction clears it.
func (pc *proxyConn) track(kind int, typ byte, b []byte) {
	if !pc.p.everyOn.Load() {
		pc.fp = nil
		return
	}
	switch kind {
	case stmtBegin, stmtCommit, stmtEnd:
		if pc.fp != nil {
			pc.fp.Reset()
		}
		return
	}
	if pc.fp == nil {
		pc.fp = sha256.New()
	}
	var n [9]byte
	n[0] = typ
	binary.BigEndian.PutUint64(n[1:], uint64(len(b)))
	pc.fp.Write(n[:])
	pc.fp.Write(b)
}

// rollbackQuery ends the transaction of a failed COMMIT.
var rollbackQuery = func() []byte {
	b, _ := (&pgproto3.Query{String: "ROLLBACK"}).Encode(nil)
	return b
}()

// failCommit fails the COMMIT being inspected, a statement of the given kind,
// if a FailCommits or FailEveryCommitOnce rule says so, and reports whether it
// did: it has then sent the server what makes it raise the error in place of
// the COMMIT (which is not forwarded) and told the relay to rewrite the
// answers. extended is set for an Execute.
func (pc *proxyConn) failCommit(kind int, extended bool) bool {
	p := pc.p
	if kind != stmtCommit || !p.failArmed.Load() || pc.stalled.Load() || pc.txStatus.Load() != 'T' {
		return false
	}
	var fp *[sha256.Size]byte
	if p.everyOn.Load() {
		var sum [sha256.Size]byte
		if pc.fp != nil {
			pc.fp.Sum(sum[:0])
			pc.fp.Reset()
		} else {
			sum = sha256.Sum256(nil)
		}
		fp = &sum
	}
	code, ok := p.commitFailure(fp)
	if !ok {
		return false
	}
	pc.inj.push() // before the server can possibly answer
	msg, _ := (&pgproto3.Query{String: failSQL(code)}).Encode(nil)
	if extended {
		pc.rollbackAtSync = true
	} else {
		msg = append(msg, rollbackQuery...)
	}
	p.injected.Add(1)
	_ = pc.write(msg) // if the server is gone, the pump's flush finds out
	return true
}

// slow holds the statement being inspected, whose SQL is sql, for as long as
// the SlowStatements rules say, after flushing what was forwarded before it.
func (pc *proxyConn) slow(sql string) error {
	d := pc.p.slowFor(sql)
	if d <= 0 || pc.stalled.Load() {
		return nil
	}
	pc.p.slowed.Add(1)
	if err := pc.bw.Flush(); err != nil {
		return fmt.Errorf("%w: %v", errServerGone, err)
	}
	t := time.NewTimer(d)
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

// fire is Proxy.fire for a statement of this connection; a stalled
// connection fires no rule, so that it does not use up firings meant for
// others.
func (pc *proxyConn) fire(kind ruleKind, sql string) bool {
	return !pc.stalled.Load() && pc.p.fire(kind, sql)
}

// stallNow flushes what was forwarded so far and stalls the connection
// instead of forwarding the current message. It returns errStalled, or
// errCut if the connection was being cut or closed meanwhile.
func (pc *proxyConn) stallNow() error {
	_ = pc.bw.Flush() // if this fails the server is gone; the stall still holds the client
	if pc.stall() || pc.stalled.Load() {
		return errStalled
	}
	return errCut
}

// stallGate passes the pump's writes on to the server until the connection
// is stalled and refuses them from then on, so that nothing still buffered
// or arriving when a stall begins reaches the server.
type stallGate struct {
	pc *proxyConn
	w  io.Writer
}

// Write implements io.Writer.
func (g stallGate) Write(b []byte) (int, error) {
	if g.pc.stalled.Load() {
		return 0, errStalled
	}
	return g.w.Write(b)
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

// delay waits until the latency configured for the connection's type has
// passed since arrival, flushing earlier messages first so they are not held
// back.
func (pc *proxyConn) delay(arrival time.Time) error {
	d := pc.p.latencyFor(pc.connType)
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
