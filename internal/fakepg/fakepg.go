package fakepg

import (
	"context"
	"net"
	"strings"
	"sync"
	"syscall"

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
}

// Statement is a statement the server received: Conn numbers the
// connection that sent it (from 1, in the order they were made).
type Statement struct {
	Conn int
	SQL  string
}

// Server is a scripted server; its Dial is a pgconn DialFunc. The zero
// value answers every statement with success.
type Server struct {
	// Answer, when set, chooses the answer to each statement, given its
	// connection's number and its text.
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

// serve logs the client in and answers its queries until it leaves.
func (s *Server) serve(b *pgproto3.Backend) {
	m, err := b.ReceiveStartupMessage()
	if err != nil {
		return
	}
	s.mu.Lock()
	_, isCancel := m.(*pgproto3.CancelRequest)
	_, isStartup := m.(*pgproto3.StartupMessage)
	if isCancel {
		s.cancels++
	}
	if isStartup {
		s.conns++
	}
	n := s.conns
	s.mu.Unlock()
	if !isStartup {
		return // a cancel request is acknowledged by the close; SSL is not served
	}
	b.Send(&pgproto3.AuthenticationOk{})
	for _, p := range [...][2]string{{"client_encoding", "UTF8"}, {"standard_conforming_strings", "on"},
		{"server_version", "15.0"}, {"in_hot_standby", "off"}} {
		b.Send(&pgproto3.ParameterStatus{Name: p[0], Value: p[1]})
	}
	b.Send(&pgproto3.BackendKeyData{ProcessID: uint32(1000 + n), SecretKey: []byte{0, 0, 0, byte(n)}})
	status := byte('I')
	b.Send(&pgproto3.ReadyForQuery{TxStatus: status})
	if b.Flush() != nil {
		return
	}
	for {
		m, err := b.Receive()
		if err != nil {
			return
		}
		switch m := m.(type) {
		case *pgproto3.Query:
			if !s.query(n, b, m.String, &status) {
				return
			}
		case *pgproto3.Terminate:
			return
		default:
			b.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "0A000", Message: "fakepg: only the simple query protocol is served"})
			b.Send(&pgproto3.ReadyForQuery{TxStatus: status})
		}
		if b.Flush() != nil {
			return
		}
	}
}

// query answers one simple query, statement by statement, as the server
// does: the first error skips the rest. It returns false when the
// connection is to close.
func (s *Server) query(n int, b *pgproto3.Backend, q string, status *byte) bool {
	stmts := split(q)
	if len(stmts) == 0 {
		b.Send(&pgproto3.EmptyQueryResponse{})
	}
	for _, sql := range stmts {
		s.mu.Lock()
		s.log = append(s.log, Statement{Conn: n, SQL: sql})
		s.mu.Unlock()
		var a Answer
		if s.Answer != nil {
			a = s.Answer(n, sql)
		}
		words := strings.Fields(strings.ToLower(sql))
		verb := words[0]
		if verb == "rollback" && len(words) > 1 && words[1] == "to" {
			verb = "rollback to" // a savepoint's: the transaction goes on
		}
		switch {
		case a.Close:
			return false
		case *status == 'E' && verb != "commit" && verb != "rollback" && verb != "rollback to":
			a.Code = "25P02"
		}
		if a.Code != "" {
			severity, msg := "ERROR", a.Message
			if a.Fatal {
				severity = "FATAL"
			}
			if msg == "" {
				msg = "fakepg: scripted error " + a.Code
			}
			b.Send(&pgproto3.ErrorResponse{Severity: severity, SeverityUnlocalized: severity, Code: a.Code, Message: msg})
			if a.Fatal {
				_ = b.Flush()
				return false
			}
			switch {
			case verb == "commit" || verb == "end":
				*status = 'I' // a COMMIT that fails ends the transaction
			case *status == 'T':
				*status = 'E'
			}
			break
		}
		b.Send(&pgproto3.CommandComplete{CommandTag: []byte(tag(verb, status))})
	}
	b.Send(&pgproto3.ReadyForQuery{TxStatus: *status})
	return true
}

// tag returns a successful statement's command tag, and moves the
// transaction status as the statement does.
func tag(verb string, status *byte) string {
	switch verb {
	case "begin":
		*status = 'T'
		return "BEGIN"
	case "commit", "end":
		failed := *status == 'E'
		*status = 'I'
		if failed {
			return "ROLLBACK"
		}
		return "COMMIT"
	case "rollback", "abort":
		*status = 'I'
		return "ROLLBACK"
	case "rollback to":
		*status = 'T'
		return "ROLLBACK"
	case "insert":
		return "INSERT 0 1"
	case "update", "delete", "select":
		return strings.ToUpper(verb) + " 1"
	}
	return strings.ToUpper(verb)
}

// split cuts a simple query into its statements at semicolons, dropping
// line comments and empty statements. Quoted semicolons are not
// understood: a test's statements do not use them.
func split(q string) []string {
	var out []string
	for _, part := range strings.Split(q, ";") {
		var lines []string
		for _, l := range strings.Split(part, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "--") {
				lines = append(lines, l)
			}
		}
		if len(lines) > 0 {
			out = append(out, strings.Join(lines, " "))
		}
	}
	return out
}
