package faultproxy

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgproto3"
)

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
