package pgtxtest

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
