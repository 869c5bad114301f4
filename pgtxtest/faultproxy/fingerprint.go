package faultproxy

import (
	"encoding/binary"
	"strings"
)

// What a transaction's fingerprint leaves out, since it changes nothing the
// transaction does: the formats a Bind asks for the results in (a client may
// ask them on one attempt and leave them to the statement's on the next), the
// names of savepoints (libraries make them up, GORM a random one at every
// call), and pgtx's reads of the transaction's id (sent with the statements
// on an attempt whose first statement went with BEGIN, and at COMMIT on
// another).

// idRead reports whether sql is one of pgtx's reads of its transaction's id,
// whose column is named pgtx_xid: a prepared one executed, or its query.
func idRead(sql string) bool {
	s := skipNoise(sql, true)
	return strings.HasPrefix(s, "execute pgtx_xid") ||
		strings.HasPrefix(s, "select pg_current_xact_id") && strings.Contains(s, " as pgtx_xid")
}

// withoutIDRead is sql, a simple Query, without the id read pgtx appends to
// a statement after a newline and a semicolon.
func withoutIDRead(sql string) string {
	if i := strings.LastIndex(sql, "\n;"); i >= 0 && idRead(sql[i+2:]) {
		return sql[:i]
	}
	return sql
}

// boundParams is a Bind message's body after the statement's name without
// its result format codes: the parameters' format codes and values. A body
// too short for what it says is returned whole.
func boundParams(b []byte) []byte {
	off := 0
	next16 := func() (int, bool) {
		if len(b)-off < 2 {
			return 0, false
		}
		n := int(int16(binary.BigEndian.Uint16(b[off:])))
		off += 2
		return n, n >= 0
	}
	formats, ok := next16()
	if !ok || len(b)-off < 2*formats {
		return b
	}
	off += 2 * formats
	params, ok := next16()
	if !ok {
		return b
	}
	for range params {
		if len(b)-off < 4 {
			return b
		}
		n := int(int32(binary.BigEndian.Uint32(b[off:])))
		off += 4
		if n > 0 {
			if len(b)-off < n {
				return b
			}
			off += n
		}
	}
	return b[:off]
}

// savepointOp is the operation of sql without the savepoint's name
// ("savepoint", "release" or "rollback to") when sql is one SAVEPOINT,
// RELEASE [SAVEPOINT] or ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT]
// statement alone, and "" otherwise.
func savepointOp(sql string) string {
	word, rest := leadingWord(skipNoise(sql, true))
	var op string
	switch strings.ToLower(word) {
	case "savepoint":
		op = "savepoint"
	case "release":
		op, rest = "release", skipOptionalWord(rest, "savepoint")
	case "rollback":
		rest = skipOptionalWord(skipOptionalWord(rest, "work"), "transaction")
		to, r := leadingWord(skipNoise(rest, false))
		if !strings.EqualFold(to, "to") {
			return ""
		}
		op, rest = "rollback to", skipOptionalWord(r, "savepoint")
	default:
		return ""
	}
	rest, ok := skipIdentifier(skipNoise(rest, false))
	if !ok || skipNoise(rest, true) != "" {
		return ""
	}
	return op
}

// skipOptionalWord returns what follows word (in any case) at the start of s
// after noise, or s if word is not there.
func skipOptionalWord(s, word string) string {
	w, rest := leadingWord(skipNoise(s, false))
	if strings.EqualFold(w, word) {
		return rest
	}
	return s
}

// skipIdentifier returns what follows the identifier, plain or quoted, that
// s starts with, and whether there was one.
func skipIdentifier(s string) (string, bool) {
	if !strings.HasPrefix(s, `"`) {
		w, rest := leadingWord(s)
		return rest, w != ""
	}
	for i := 1; i < len(s); i++ {
		if s[i] != '"' {
			continue
		}
		if i+1 < len(s) && s[i+1] == '"' { // "" inside a quoted name
			i++
			continue
		}
		return s[i+1:], i > 1
	}
	return "", false
}
