package faultproxy

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// ruleKind says when a fault rule acts relative to forwarding the statement.
type ruleKind int

const (
	// cutAfter forwards the statement, then cuts the connection.
	cutAfter ruleKind = iota
	// cutBefore cuts the connection instead of forwarding the statement.
	cutBefore
	// cutOnReply drops the server's answer to a COMMIT and cuts.
	cutOnReply
	// stallCommit stalls the connection instead of forwarding the statement.
	stallCommit
)

// rule is one armed fault. Its fields other than match and kind are guarded
// by Proxy.mu.
type rule struct {
	kind      ruleKind
	match     func(sql string) bool // nil matches every statement
	unlimited bool                  // n <= 0: fire on every match until Reset
	remaining int                   // firings left when !unlimited
	dead      bool                  // disarmed (used up or Reset)
}

// addRule arms a rule of the given kind.
func (p *Proxy) addRule(kind ruleKind, match func(string) bool, n int) {
	r := &rule{kind: kind, match: match, unlimited: n <= 0, remaining: n}
	p.mu.Lock()
	p.rules = append(p.rules, r)
	p.mu.Unlock()
}

// CutAfterForward arms a rule that forwards a statement matched by match to
// the server and then cuts both sides of that connection before any server
// reply to it reaches the client: the server receives the whole statement
// (and normally executes it — a COMMIT is applied), but the client only
// sees its connection close. A nil match matches every statement.
//
// The rule fires on the next n matching statements across all connections
// and then disarms; n <= 0 keeps it armed until Reset or Close.
//
// For a simple Query the cut follows the Query message. For the extended
// protocol the rule is checked at each Execute, against the SQL of the
// prepared statement behind the executed portal (as sent in its Parse
// message, so statements prepared earlier or cached by the driver match
// too); a Parse alone (e.g. preparing without executing) never fires it. On
// a match the proxy stops relaying server output at once and cuts right
// after forwarding the next Sync or Flush, the message that makes the
// server finish the work and send its results (an implicit transaction
// commits at Sync).
//
// After the cut the proxy half-closes the server socket (the server reads
// everything that was forwarded, then end of stream) and discards the
// server's output for up to a few seconds before closing it, so the server
// finishes the forwarded message rather than being reset mid-stream. pgx
// (pgconn) reacts to a broken connection by sending a CancelRequest for its
// backend on a new connection; the proxy holds such a cancel until the cut
// backend's socket is finished (normally when the backend exits after
// processing the forwarded statement), then forwards it. Without that hold
// the driver's reflexive cancel could interrupt the statement the proxy
// has just forwarded. Together these make the outcome deterministic: a
// forwarded COMMIT is applied.
func (p *Proxy) CutAfterForward(match func(sql string) bool, n int) {
	p.addRule(cutAfter, match, n)
}

// CutBeforeForward arms a rule that cuts both sides of the connection
// instead of forwarding a statement matched by match, so the server never
// sees it. A nil match matches every statement. Messages received before
// the matching one are forwarded first.
//
// The rule fires on the next n matching statements across all connections
// and then disarms; n <= 0 keeps it armed until Reset or Close.
//
// In the extended protocol the rule is checked at each Parse (the Parse is
// dropped) and at each Execute of a portal whose statement's SQL matches
// (the Execute is dropped), so re-executing a statement prepared earlier is
// cut as well. When a CutBeforeForward and a CutAfterForward rule both match
// a statement, the CutBeforeForward rule fires and the other stays armed.
func (p *Proxy) CutBeforeForward(match func(sql string) bool, n int) {
	p.addRule(cutBefore, match, n)
}

// CutOnCommit is shorthand for CutAfterForward(IsCommit, n): the next n
// COMMITs reach the server, but their clients see the connection die
// instead of the server's answer.
func (p *Proxy) CutOnCommit(n int) {
	p.CutAfterForward(IsCommit, n)
}

// CutOnCommitReply arms a rule that lets a COMMIT reach the server and run,
// relays everything the server sends before its answer, then drops the
// answer (CommandComplete "COMMIT") and cuts the connection: the transaction
// has committed and the client learns nothing of it. This is the ambiguous
// COMMIT whose resolution must say "committed". The rule fires on the next n
// such answers across all connections; n <= 0 keeps it armed.
func (p *Proxy) CutOnCommitReply(n int) {
	p.addRule(cutOnReply, nil, n)
}

// StallOnCommit arms a rule that simulates a network partition at a COMMIT:
// the next n COMMITs (as IsCommit tells) across all connections are not
// forwarded, and each connection that sent one is stalled from then on (see
// StallAll): the client gets no answer and the server's backend stays
// alive, idle in its transaction and holding its locks, until ReleaseStalled
// or Close. n <= 0 keeps the rule armed until Reset or Close.
//
// Statements are matched as CutBeforeForward matches them: a simple Query,
// and in the extended protocol each Parse (which is not forwarded) and each
// Execute of a portal whose statement is a COMMIT (not forwarded either,
// though the Bind before it has reached the server). Messages received
// before the matching one are forwarded first. A CutBeforeForward rule that
// matches the same statement fires instead; a CutAfterForward rule that
// matches it stays armed.
func (p *Proxy) StallOnCommit(n int) {
	p.addRule(stallCommit, IsCommit, n)
}

// fire reports whether an armed rule of the given kind matches sql, and if
// so consumes one of its firings. Matchers run without p.mu held, so they
// may call Proxy methods; when several connections race for the last firing
// of a rule exactly one of them wins.
func (p *Proxy) fire(kind ruleKind, sql string) bool {
	p.mu.Lock()
	if len(p.rules) == 0 {
		p.mu.Unlock()
		return false
	}
	var candidates []*rule
	for _, r := range p.rules {
		if r.kind == kind {
			candidates = append(candidates, r)
		}
	}
	p.mu.Unlock()
	for _, r := range candidates {
		if r.match != nil && !r.match(sql) {
			continue
		}
		if p.claim(r) {
			return true
		}
	}
	return false
}

// claim consumes one firing of r, reporting false if r was disarmed in the
// meantime.
func (p *Proxy) claim(r *rule) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.dead {
		return false
	}
	if r.unlimited {
		return true
	}
	r.remaining--
	if r.remaining <= 0 {
		r.dead = true
		p.rules = slices.DeleteFunc(p.rules, func(x *rule) bool { return x == r })
	}
	return true
}

// IsCommit reports whether the first statement of sql commits a
// transaction: COMMIT or END, optionally followed by WORK, TRANSACTION,
// AND [NO] CHAIN, and COMMIT PREPARED 'gid' (the second phase of a two-phase
// commit). Matching is case-insensitive and skips leading whitespace, SQL
// comments (-- line and nested /* block */ comments) and empty statements,
// and looks only at the first statement, so "commit; select 1" is a commit
// while "select 1; commit" and "COMMITTED" are not.
func IsCommit(sql string) bool {
	s := skipNoise(sql, true)
	word, rest := leadingWord(s)
	isCommit := strings.EqualFold(word, "commit")
	if !isCommit && !strings.EqualFold(word, "end") {
		return false
	}
	rest = skipNoise(rest, false)
	if rest == "" || rest[0] == ';' {
		return true
	}
	next, _ := leadingWord(rest)
	switch strings.ToLower(next) {
	case "work", "transaction", "and":
		return true
	case "prepared":
		return isCommit
	}
	return false
}

// MatchPrefix returns a statement matcher that reports whether a statement
// starts with prefix, compared case-insensitively after skipping the
// statement's leading whitespace and SQL comments. The prefix itself is
// used as given; an empty prefix matches every statement.
func MatchPrefix(prefix string) func(sql string) bool {
	return func(sql string) bool {
		return hasPrefixFold(skipNoise(sql, false), prefix)
	}
}

// hasPrefixFold is a case-insensitive strings.HasPrefix that does not copy s.
func hasPrefixFold(s, prefix string) bool {
	for prefix != "" {
		_, pn := utf8.DecodeRuneInString(prefix)
		_, sn := utf8.DecodeRuneInString(s)
		if sn == 0 || !strings.EqualFold(s[:sn], prefix[:pn]) {
			return false
		}
		s, prefix = s[sn:], prefix[pn:]
	}
	return true
}

// skipNoise strips leading whitespace and SQL comments from s and, when
// semicolons is set, empty statements too. An unterminated block comment
// swallows the rest of s.
func skipNoise(s string, semicolons bool) string {
	for {
		s = strings.TrimLeft(s, " \t\n\r\f\v")
		switch {
		case strings.HasPrefix(s, "--"):
			i := strings.IndexByte(s, '\n')
			if i < 0 {
				return ""
			}
			s = s[i+1:]
		case strings.HasPrefix(s, "/*"):
			s = skipBlockComment(s)
		case semicolons && strings.HasPrefix(s, ";"):
			s = s[1:]
		default:
			return s
		}
	}
}

// skipBlockComment returns what follows the (possibly nested) block comment
// that s starts with, or "" if it is unterminated.
func skipBlockComment(s string) string {
	depth := 0
	for i := 0; i+1 < len(s); {
		switch {
		case s[i] == '/' && s[i+1] == '*':
			depth++
			i += 2
		case s[i] == '*' && s[i+1] == '/':
			depth--
			i += 2
			if depth == 0 {
				return s[i:]
			}
		default:
			i++
		}
	}
	return ""
}

// leadingWord splits s into its leading identifier-like word (letters,
// digits, '_', '$' and any non-ASCII byte) and the rest.
func leadingWord(s string) (word, rest string) {
	i := 0
	for i < len(s) {
		c := s[i]
		if c >= 0x80 || c == '_' || c == '$' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') {
			i++
			continue
		}
		break
	}
	return s[:i], s[i:]
}
