package faultproxy

import "github.com/jackc/pgx/v5/pgproto3"

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

// RejectNew sets the server error that new client connections get, as a
// PostgreSQL server answers while it cannot take them: the proxy reads the
// startup message and answers FATAL with code and its server's words for it
// ("57P03": "the database system is starting up", "53300": "sorry, too many
// clients already"; another code: "connection rejected"), without reaching
// the server. An empty code stops rejecting. Established connections and
// cancel requests are not affected.
func (p *Proxy) RejectNew(code string) {
	if code == "" {
		p.reject.Store(nil)
		return
	}
	p.reject.Store(&code)
}

// rejectMessages are a server's words for the codes RejectNew answers.
var rejectMessages = map[string]string{
	"57P03": "the database system is starting up",
	"53300": "sorry, too many clients already",
}

// rejection returns the ErrorResponse a new connection gets, or nil.
func (p *Proxy) rejection() []byte {
	code := p.reject.Load()
	if code == nil {
		return nil
	}
	msg, ok := rejectMessages[*code]
	if !ok {
		msg = "connection rejected"
	}
	b, _ := (&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: *code, Message: msg}).Encode(nil)
	return b
}
