package faultproxy

import (
	"fmt"
	"time"
)

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
	return pc.hold(wait)
}

// hold flushes what was forwarded so far (once the server is dialled), so
// it is not held back too, then waits d, or until the connection is cut or
// the proxy closed.
func (pc *proxyConn) hold(d time.Duration) error {
	if pc.bw != nil {
		if err := pc.bw.Flush(); err != nil {
			return fmt.Errorf("%w: %v", errServerGone, err)
		}
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
