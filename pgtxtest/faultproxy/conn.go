package faultproxy

import (
	"bufio"
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
	case errors.Is(err, errMalformed), errors.Is(err, errRejected):
		// errRejected: closed after the FATAL, as a server closes.
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
	} else if e := pc.p.rejection(); e != nil {
		pc.p.rejected.Add(1)
		if _, err := pc.client.Write(e); err != nil {
			return fmt.Errorf("%w: %v", errClientGone, err)
		}
		return errRejected
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
