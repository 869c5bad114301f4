package faultproxy

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// relay copies server bytes to the client until the server side ends, then
// closes both sockets, except that a stalled connection's client is left
// open for ReleaseStalled or Close, so that it does not learn of the server
// leaving. Until the first ReadyForQuery it records the backend's
// BackendKeyData (see holdCancel); after that it forwards message by message
// (relayMessages), so a CutOnCommitReply rule can drop a COMMIT's answer.
func (pc *proxyConn) relay(server net.Conn) {
	defer pc.p.wg.Done()
	defer close(pc.relayDone)
	defer func() {
		_ = server.Close()
		pc.mu.Lock()
		pc.relayEnded = true
		stalled := pc.stalled.Load()
		pc.mu.Unlock()
		if !stalled {
			_ = pc.client.Close()
		}
	}()
	sbr := bufio.NewReaderSize(server, 32<<10)
	if !pc.relayStartup(sbr) {
		return
	}
	pc.relayMessages(sbr)
}

// relayMessages forwards framed server messages until the server side ends.
// It reads whole only small messages it must look at: ReadyForQuery, to know
// the transaction status; CommandComplete, to let a CutOnCommitReply rule drop
// a COMMIT's answer; and while a failed COMMIT's answers are being rewritten
// (see FailCommits), ErrorResponse too. Everything else is streamed. Once the
// connection is muted (cut, stalled or closing) the answer would not reach
// the client anyway, so it no longer uses up a firing of the rule.
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
		whole := (typ == 'Z' && n == 5) || (typ == 'C' && n <= 64)
		if !whole && typ == 'E' && n <= inspectInline {
			whole = pc.inj.pending()
		}
		if whole {
			m := make([]byte, 1+n)
			if k, err := io.ReadFull(sbr, m); err != nil {
				pc.toClient(m[:k])
				return
			}
			if typ == 'Z' {
				pc.txStatus.Store(uint32(m[5]))
			}
			if pc.inj.pending() {
				pc.toClient(pc.inj.rewrite(m))
				continue
			}
			if tag, _, _ := cstring(m[5:]); typ == 'C' && tag == "COMMIT" && !pc.muted.Load() && pc.p.fire(cutOnReply, tag) {
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
// muted (which a stalled connection always is). If the client is gone the
// server is left to drain.
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
// increments counter before the client can observe the cut. A stalled
// connection is not cut: only release and closeHard end it.
func (pc *proxyConn) cut(counter *atomic.Int64) bool {
	pc.mu.Lock()
	if pc.ending || pc.closed || pc.stalled.Load() {
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
// on what the server still sends, for at most drainTimeout. On a stalled
// connection it does nothing, since the server must not notice.
func (pc *proxyConn) clientGone() {
	pc.mu.Lock()
	if pc.ending || pc.closed || pc.stalled.Load() {
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

// stall stops all forwarding on the connection in both directions and keeps
// both of its sockets open until release or closeHard. It reports whether
// this call stalled the connection, and if so counts the stall. A
// connection that is already stalled, being cut or closed, or whose client
// or server side has ended, is not stalled: it is going away by itself.
func (pc *proxyConn) stall() bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.stalled.Load() || pc.ending || pc.closed || pc.pumpDone || pc.relayEnded {
		return false
	}
	pc.stalled.Store(true)
	pc.muted.Store(true)
	pc.p.stalls.Add(1)
	return true
}

// release ends a stalled connection by closing both of its sockets, and
// reports whether it did; concurrent calls release a connection once.
func (pc *proxyConn) release() bool {
	pc.mu.Lock()
	if !pc.stalled.Load() || pc.closed {
		pc.mu.Unlock()
		return false
	}
	pc.closed = true
	pc.mu.Unlock()
	pc.closeHard()
	return true
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
