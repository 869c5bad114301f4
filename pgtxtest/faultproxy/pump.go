package faultproxy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

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
