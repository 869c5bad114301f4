package fakepg

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
)

// session is one client's connection: its number, its transaction status,
// and the statements and portals of the extended protocol.
type session struct {
	s       *Server
	n       int
	b       *pgproto3.Backend
	status  byte
	stmts   map[string]stmt
	portals map[string]*portal
	// failed: a message of the extended protocol failed, and the ones
	// after it are skipped until Sync, as the server skips them.
	failed bool
}

// serve logs the client in and answers its messages until it leaves.
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
	ss := &session{s: s, n: n, b: b, status: 'I', stmts: map[string]stmt{}, portals: map[string]*portal{}}
	b.Send(&pgproto3.ReadyForQuery{TxStatus: ss.status})
	if b.Flush() != nil {
		return
	}
	for {
		m, err := b.Receive()
		if err != nil {
			return
		}
		// The server sends its output when a query or a Sync ends, or when
		// the client asks with Flush; the extended protocol's other
		// messages are answered into the buffer.
		flush := true
		switch m := m.(type) {
		case *pgproto3.Query:
			if !ss.query(m.String) {
				return
			}
		case *pgproto3.Sync:
			ss.failed = false
			b.Send(&pgproto3.ReadyForQuery{TxStatus: ss.status})
		case *pgproto3.Flush:
		case *pgproto3.Terminate:
			return
		default:
			served, ok := ss.extended(m)
			if !ok {
				return
			}
			if !served {
				ss.fail("0A000", "fakepg: this message is not served")
				b.Send(&pgproto3.ReadyForQuery{TxStatus: ss.status})
				ss.failed = false
			} else {
				flush = false
			}
		}
		if flush && b.Flush() != nil {
			return
		}
	}
}

// answer asks the test for the answer to sql.
func (ss *session) answer(sql string) Answer {
	if ss.s.Answer == nil {
		return Answer{}
	}
	return ss.s.Answer(ss.n, sql)
}

// query answers one simple query, statement by statement, as the server
// does: the first error skips the rest. It returns false when the
// connection is to close.
func (ss *session) query(q string) bool {
	stmts := split(q)
	if len(stmts) == 0 {
		ss.b.Send(&pgproto3.EmptyQueryResponse{})
	}
	for _, sql := range stmts {
		ss.s.logStatement(ss.n, sql, nil)
		ok, failed := ss.execute(sql, ss.answer(ss.prepared(sql)), true, nil)
		if !ok {
			return false
		}
		if failed {
			break
		}
	}
	ss.b.Send(&pgproto3.ReadyForQuery{TxStatus: ss.status})
	return true
}

// prepared keeps the statement a simple PREPARE prepares, as the
// extended protocol's Parse does, and returns the text whose answer a
// statement gets: for a simple EXECUTE, the text of the statement it
// executes (when it was prepared).
func (ss *session) prepared(sql string) string {
	words := strings.Fields(sql)
	switch verbOf(sql) {
	case "prepare":
		lower := strings.ToLower(sql)
		if i := strings.Index(lower, " as "); i > 0 && len(words) > 1 {
			name, _, _ := strings.Cut(words[1], "(")
			ss.stmts[name] = stmt{sql: strings.TrimSpace(sql[i+len(" as "):])}
		}
	case "execute":
		if len(words) > 1 {
			name, _, _ := strings.Cut(words[1], "(")
			if st, ok := ss.stmts[name]; ok {
				return st.sql
			}
		}
	}
	return sql
}

// execute sends the result of sql, whose answer is a, and moves the
// transaction status as the statement does. describe says to send the
// rows' description first (the simple protocol's; the extended protocol
// describes at Describe), formats are the result formats the client asked
// for. It returns ok false when the connection is to close, and failed
// true when the statement failed.
func (ss *session) execute(sql string, a Answer, describe bool, formats []int16) (ok, failed bool) {
	verb := verbOf(sql)
	switch {
	case a.Close:
		return false, true
	case ss.status == 'E' && verb != "commit" && verb != "rollback" && verb != "rollback to":
		a.Code = "25P02"
	}
	if a.Code != "" {
		if a.Fatal {
			ss.send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: a.Code, Message: message(a)})
			_ = ss.b.Flush()
			return false, true
		}
		ss.fail(a.Code, message(a))
		switch {
		case verb == "commit" || verb == "end":
			ss.status = 'I' // a COMMIT that fails ends the transaction
		case ss.status == 'T':
			ss.status = 'E'
		}
		return true, true
	}
	rows := -1
	if a.Columns != nil {
		if describe {
			ss.send(rowDescription(a.Columns, formats))
		}
		for _, r := range a.Rows {
			ss.send(dataRow(r, a.Columns, formats))
		}
		rows = len(a.Rows)
	}
	ss.send(&pgproto3.CommandComplete{CommandTag: []byte(tag(verb, &ss.status, rows))})
	return true, false
}

// send buffers a message to the client.
func (ss *session) send(m pgproto3.BackendMessage) { ss.b.Send(m) }

// fail sends an error (the session goes on).
func (ss *session) fail(code, msg string) {
	ss.send(&pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: code, Message: msg})
}

// message is a scripted error's text.
func message(a Answer) string {
	if a.Message == "" {
		return "fakepg: scripted error " + a.Code
	}
	return a.Message
}

// verbOf returns what a statement does, from its first words.
func verbOf(sql string) string {
	words := strings.Fields(strings.ToLower(sql))
	if len(words) == 0 {
		return ""
	}
	if words[0] == "rollback" && len(words) > 1 && words[1] == "to" {
		return "rollback to" // a savepoint's: the transaction goes on
	}
	return words[0]
}

// tag returns a successful statement's command tag, and moves the
// transaction status as the statement does; rows is how many rows it
// returned (-1: it was not scripted to return any).
func tag(verb string, status *byte, rows int) string {
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
	case "select", "execute":
		if rows >= 0 {
			return "SELECT " + strconv.Itoa(rows)
		}
		if verb == "select" {
			return "SELECT 1"
		}
	case "update", "delete":
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
