package pgtxtest

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
