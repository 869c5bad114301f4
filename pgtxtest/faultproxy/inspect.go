package faultproxy

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/jackc/pgx/v5/pgproto3"
)

// inspect decodes a statement-related message, applies the fault rules and
// forwards it (unless cut before forwarding, stalled, or replaced by a failed
// COMMIT).
func (pc *proxyConn) inspect(typ byte, hdr, body []byte) error {
	p := pc.p
	after := false
	switch typ {
	case 'Q':
		var m pgproto3.Query
		if err := m.Decode(body); err != nil {
			return fmt.Errorf("%w: %v", errMalformed, err)
		}
		p.statements.Add(1)
		// A simple Query destroys the unnamed statement and portal.
		delete(pc.stmts, "")
		delete(pc.portals, "")
		if err := pc.slow(m.String); err != nil {
			return err
		}
		if pc.fire(cutBefore, m.String) {
			return pc.cutNow(cutBefore)
		}
		if pc.fire(stallCommit, m.String) {
			return pc.stallNow()
		}
		if pc.fire(cutAfter, m.String) {
			after = true
			pc.muted.Store(true) // before the server can possibly answer
		}
		kind := statementKind(m.String)
		if !after && pc.failCommit(kind, false) {
			return nil
		}
		pc.track(kind, 'Q', m.String, nil)
	case 'P':
		var m pgproto3.Parse
		if err := m.Decode(body); err != nil {
			return fmt.Errorf("%w: %v", errMalformed, err)
		}
		p.statements.Add(1)
		if pc.fire(cutBefore, m.Query) {
			return pc.cutNow(cutBefore)
		}
		if pc.fire(stallCommit, m.Query) {
			return pc.stallNow()
		}
		pc.stmts[m.Name] = m.Query
	case 'B':
		// Only the portal and statement names are needed; decoding the
		// whole Bind would copy every parameter value.
		name, rest, ok := cstring(body)
		stmt, params, ok2 := cstring(rest)
		if !ok || !ok2 {
			return fmt.Errorf("%w: bad Bind", errMalformed)
		}
		if sql, ok := pc.stmts[stmt]; ok {
			pt := portal{sql: sql}
			if p.everyOn.Load() {
				h := sha256.New()
				h.Write([]byte(sql))
				h.Write([]byte{0})
				h.Write(boundParams(params))
				h.Sum(pt.digest[:0])
			}
			pc.portals[name] = pt
		} else {
			delete(pc.portals, name)
		}
	case 'E':
		var m pgproto3.Execute
		if err := m.Decode(body); err != nil {
			return fmt.Errorf("%w: %v", errMalformed, err)
		}
		if pt, ok := pc.portals[m.Portal]; ok {
			if err := pc.slow(pt.sql); err != nil {
				return err
			}
			if pc.fire(cutBefore, pt.sql) {
				return pc.cutNow(cutBefore)
			}
			if pc.fire(stallCommit, pt.sql) {
				return pc.stallNow()
			}
			if !pc.cutAfterSync && pc.fire(cutAfter, pt.sql) {
				pc.cutAfterSync = true
				pc.muted.Store(true) // before the server can possibly answer
			}
			kind := statementKind(pt.sql)
			if !pc.cutAfterSync && pc.failCommit(kind, true) {
				return nil
			}
			pc.track(kind, 'E', pt.sql, pt.digest[:])
		}
	case 'C':
		var m pgproto3.Close
		if err := m.Decode(body); err != nil {
			return fmt.Errorf("%w: %v", errMalformed, err)
		}
		switch m.ObjectType {
		case 'S':
			delete(pc.stmts, m.Name)
		case 'P':
			delete(pc.portals, m.Name)
		}
	}
	if err := pc.write(hdr); err != nil {
		return err
	}
	if err := pc.write(body); err != nil {
		return err
	}
	if after {
		return pc.cutNow(cutAfter)
	}
	return nil
}

// track updates the fingerprint of the current transaction with a statement
// of the given kind, executed as typ ('Q' with its SQL, 'E' with its portal's
// digest), as [fingerprinted] says: BEGIN starts a new one, the end of a
// transaction clears it.
func (pc *proxyConn) track(kind int, typ byte, sql string, digest []byte) {
	if !pc.p.everyOn.Load() {
		pc.fp = nil
		return
	}
	switch kind {
	case stmtBegin, stmtCommit, stmtEnd:
		if pc.fp != nil {
			pc.fp.Reset()
		}
		return
	}
	b, ok := fingerprinted(kind, sql, digest)
	if !ok {
		return
	}
	if pc.fp == nil {
		pc.fp = sha256.New()
	}
	var n [9]byte
	n[0] = typ
	binary.BigEndian.PutUint64(n[1:], uint64(len(b)))
	pc.fp.Write(n[:])
	pc.fp.Write(b)
}

// fingerprinted is what a statement of the given kind adds to its
// transaction's fingerprint, and false for pgtx's id read, which adds
// nothing: a lone savepoint statement its operation without the name, any
// other statement b, or its SQL (a simple Query's, without an id read it
// ends with) when b is nil.
func fingerprinted(kind int, sql string, b []byte) ([]byte, bool) {
	if idRead(sql) {
		return nil, false
	}
	if b == nil {
		sql = withoutIDRead(sql)
	}
	if kind == stmtSavepoint {
		if op := savepointOp(sql); op != "" {
			return []byte(op), true
		}
	}
	if b == nil {
		return []byte(sql), true
	}
	return b, true
}

// rollbackQuery ends the transaction of a failed COMMIT.
var rollbackQuery = func() []byte {
	b, _ := (&pgproto3.Query{String: "ROLLBACK"}).Encode(nil)
	return b
}()

// failCommit fails the COMMIT being inspected, a statement of the given kind,
// if a FailCommits or FailEveryCommitOnce rule says so, and reports whether it
// did: it has then sent the server what makes it raise the error in place of
// the COMMIT (which is not forwarded) and told the relay to rewrite the
// answers. extended is set for an Execute.
func (pc *proxyConn) failCommit(kind int, extended bool) bool {
	p := pc.p
	if kind != stmtCommit || !p.failArmed.Load() || pc.stalled.Load() || pc.txStatus.Load() != 'T' {
		return false
	}
	var fp *[sha256.Size]byte
	if p.everyOn.Load() {
		var sum [sha256.Size]byte
		if pc.fp != nil {
			pc.fp.Sum(sum[:0])
			pc.fp.Reset()
		} else {
			sum = sha256.Sum256(nil)
		}
		fp = &sum
	}
	code, ok := p.commitFailure(fp)
	if !ok {
		return false
	}
	pc.inj.push() // before the server can possibly answer
	msg, _ := (&pgproto3.Query{String: failSQL(code)}).Encode(nil)
	if extended {
		pc.rollbackAtSync = true
	} else {
		msg = append(msg, rollbackQuery...)
	}
	p.injected.Add(1)
	_ = pc.write(msg) // if the server is gone, the pump's flush finds out
	return true
}

// slow holds the statement being inspected, whose SQL is sql, for as long as
// the SlowStatements rules say, after flushing what was forwarded before it.
func (pc *proxyConn) slow(sql string) error {
	d := pc.p.slowFor(sql)
	if d <= 0 || pc.stalled.Load() {
		return nil
	}
	pc.p.slowed.Add(1)
	return pc.hold(d)
}

// fire is Proxy.fire for a statement of this connection; a stalled
// connection fires no rule, so that it does not use up firings meant for
// others.
func (pc *proxyConn) fire(kind ruleKind, sql string) bool {
	return !pc.stalled.Load() && pc.p.fire(kind, sql)
}

// stallNow flushes what was forwarded so far and stalls the connection
// instead of forwarding the current message. It returns errStalled, or
// errCut if the connection was being cut or closed meanwhile.
func (pc *proxyConn) stallNow() error {
	_ = pc.bw.Flush() // if this fails the server is gone; the stall still holds the client
	if pc.stall() || pc.stalled.Load() {
		return errStalled
	}
	return errCut
}

// cutNow flushes what was forwarded so far, cuts the connection and counts
// the cut under kind. It always returns errCut.
func (pc *proxyConn) cutNow(kind ruleKind) error {
	_ = pc.bw.Flush() // if this fails the server is gone anyway
	counter := &pc.p.cutsAfter
	if kind == cutBefore {
		counter = &pc.p.cutsBefore
	}
	pc.cut(counter)
	return errCut
}
