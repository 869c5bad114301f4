package fakepg

import (
	"context"
	"net"
	"sync"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Answer is what the server does with one statement.
type Answer struct {
	// Code, when set, answers with an error of that SQLSTATE, and Message
	// is its text. With Fatal, the error is FATAL: the server then closes
	// the connection, as PostgreSQL does when it ends a session.
	Code    string
	Message string
	Fatal   bool
	// Close closes the connection without answering: the statement's
	// answer is lost, whether or not it ran.
	Close bool
	// Columns, when set, make the statement return Rows: each value is
	// sent as the text of fmt.Sprint (nil: NULL), or in the binary format
	// of its column's type when the client asks for it (int2, int4, int8,
	// bool and text are known).
	Columns []Column
	Rows    [][]any
}

// Column is a column of a statement's result.
type Column struct {
	Name string
	OID  uint32 // the column's type: 20 int8, 23 int4, 25 text, 16 bool...
}

// Statement is a statement the server received: Conn numbers the
// connection that sent it (from 1, in the order they were made).
type Statement struct {
	Conn int
	SQL  string
	// Params are the values bound to an extended-protocol statement's
	// parameters, as sent (text, or the bytes of the binary format); nil
	// for NULL.
	Params []*string
}

// Server is a scripted server; its Dial is a pgconn DialFunc. The zero
// value answers every statement with success, and no rows.
type Server struct {
	// Answer, when set, chooses the answer to each statement, given its
	// connection's number and its text. In the extended protocol it is
	// asked when the statement is described (a Describe of the statement
	// or of its portal: the columns come from it) and, for a portal not
	// described, when it is executed; a portal's answer is the one its
	// Describe got. A simple EXECUTE of a statement prepared with PREPARE
	// gets the answer of that statement's text.
	Answer func(conn int, sql string) Answer

	mu      sync.Mutex
	closed  bool // Wait has begun: no more connections
	conns   int
	cancels int
	log     []Statement
	wg      sync.WaitGroup
}

// Dial opens a connection to the server, served by a goroutine that ends
// when either side closes it; [Server.Wait] waits for every one. Once Wait
// has begun, a connection is refused, as a server that has shut down
// refuses it: pgconn still dials, from a goroutine of its own, to send a
// cancel request for a connection it closed after a broken read.
func (s *Server) Dial(context.Context, string, string) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, &net.OpError{Op: "dial", Net: "pipe", Err: syscall.ECONNREFUSED}
	}
	client, server := net.Pipe()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer server.Close()
		s.serve(pgproto3.NewBackend(server, server))
	}()
	return client, nil
}

// Wait refuses new connections and waits until every connection's
// goroutine has ended: call it after closing the pool.
func (s *Server) Wait() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
}

// Conns returns how many sessions were started.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// Cancels returns how many protocol cancel requests arrived. Each is
// acknowledged by closing its connection, as the server does; none stops
// anything, since no statement of the server runs for long.
func (s *Server) Cancels() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancels
}

// Log returns the statements received so far, in order.
func (s *Server) Log() []Statement {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Statement(nil), s.log...)
}

// SQL returns the text of the statements received so far, in order.
func (s *Server) SQL() []string {
	var out []string
	for _, st := range s.Log() {
		out = append(out, st.SQL)
	}
	return out
}

// logStatement records a statement received on connection n.
func (s *Server) logStatement(n int, sql string, params []*string) {
	s.mu.Lock()
	s.log = append(s.log, Statement{Conn: n, SQL: sql, Params: params})
	s.mu.Unlock()
}

// URL is a connection string for a configuration that [Server.Reach] sends
// to a server: its host is never looked up.
const URL = "postgres://app@fake:5432/app?sslmode=disable"

// Reach makes the connections of cc reach s: they dial s, and look no host
// up.
func (s *Server) Reach(cc *pgconn.Config) {
	cc.DialFunc = s.Dial
	cc.LookupFunc = func(context.Context, string) ([]string, error) { return []string{"127.0.0.1"}, nil }
}
