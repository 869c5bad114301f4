package faultproxy

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/failcode"
)

// failedByProxy starts the message of every injected error.
const failedByProxy = "pgtxtest: injected "

// failSQL is what the proxy sends the server in place of a COMMIT that is to fail
// with code: the server raises the error, which aborts the transaction.
func failSQL(code string) string {
	return "DO $pgtxtest$ BEGIN RAISE EXCEPTION USING ERRCODE = '" + code + "', MESSAGE = '" + failcode.Messages[code] +
		"', DETAIL = 'The pgtxtest fault proxy sent this in place of the transaction''s COMMIT; the transaction was rolled back.'" +
		", HINT = 'The transaction might succeed if retried.'; END $pgtxtest$"
}

// FailCommits makes the next n COMMITs, across all of the proxy's connections,
// fail with SQLSTATE code, which must be 40001 (serialization_failure) or 40P01
// (deadlock_detected); n <= 0 makes every COMMIT fail until [Proxy.StopFailing],
// [Proxy.Reset] or Close. A later call replaces the count and the code.
//
// The failure is the server's own: instead of the COMMIT, the proxy sends a DO
// block that raises the error inside the transaction, which the server therefore
// aborts, then a ROLLBACK, and hands the client the server's ErrorResponse (without
// its PL/pgSQL context) followed by a ReadyForQuery saying "idle". That is what a
// client sees when COMMIT itself fails: the transaction is over, nothing of it was
// committed, the connection is usable, and the server counts a rollback
// (pg_stat_database.xact_rollback). [Stats].InjectedFailures counts these.
//
// A COMMIT fails this way when it is alone in a simple-protocol Query message (a
// COMMIT, COMMIT WORK or TRANSACTION, or END, as [IsCommit] tells, but not COMMIT
// AND CHAIN, nor COMMIT PREPARED), which is how pgx's Tx.Commit and pgtx send it,
// or when it is an extended-protocol Execute of a prepared COMMIT (the proxy then
// sends the DO block as a Query message in the Execute's place and the ROLLBACK after
// the client's Sync). Only a COMMIT sent while the server says the connection is in
// an open transaction block counts: after the answers to everything before it (a
// client that pipelines COMMIT behind statements whose answers it has not read may
// see it forwarded as is), and not one in a failed transaction (whose COMMIT answers
// ROLLBACK) nor outside a transaction. A cut or stall rule that matches the COMMIT
// fires instead.
//
// Like t.Fatal, a refused code fails the test that made the proxy with [New],
// and must be called from its goroutine; for a proxy from [Start], it is returned
// as an error wrapping [pgtx.ErrInvalidArgument]. The error is nil otherwise.
func (p *Proxy) FailCommits(n int, code string) error {
	if p.tb != nil {
		p.tb.Helper() // a refused code fails the test at the line of the call
	}
	if err := failcode.Check(code); err != nil {
		return p.badArgument("FailCommits", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failN, p.failCode = n, code
	if n <= 0 {
		p.failN = -1 // every COMMIT
	}
	p.failArmed.Store(true)
	return nil
}

// FailEveryCommitOnce makes the first COMMIT of every transaction fail with
// SQLSTATE code (40001 or 40P01) as [Proxy.FailCommits] makes it fail, and its
// retry pass, until [Proxy.StopFailing], [Proxy.Reset] or Close: each transaction
// function of a client that retries serialization failures, such as
// [pgtx.Transaction], runs twice.
//
// A transaction is known across connections by a fingerprint of what it executed
// between BEGIN and COMMIT: the SQL of every statement, and for the extended
// protocol the parameter values and formats that were bound. BEGIN itself is left
// out (pgtx's BEGIN carries a statement_timeout that changes between attempts), and
// so are the formats asked for the results (a client may ask them on one attempt
// and not on the next), the names of savepoints (libraries make them up, GORM a
// random one at every call) and pgtx's reads of the transaction's id (sent with
// the statements on some attempts, at COMMIT on others). A COMMIT fails when the
// COMMITs that fingerprint has seen so far are even in number (the first fails,
// the second passes, the third fails, ...), so identical transactions that run
// one after another each fail once. Identical transactions
// that run at the same time share a count (one may fail twice and another not at
// all), and a transaction whose statements or parameters change between attempts
// (a timestamp or random id made in the function) is new at every attempt and
// fails every time, until its client gives up. A later call replaces the code and
// keeps the counts.
//
// A refused code is reported as for FailCommits.
func (p *Proxy) FailEveryCommitOnce(code string) error {
	if p.tb != nil {
		p.tb.Helper() // a refused code fails the test at the line of the call
	}
	if err := failcode.Check(code); err != nil {
		return p.badArgument("FailEveryCommitOnce", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.everyCode = code
	if p.everyCounts == nil {
		p.everyCounts = make(map[[sha256.Size]byte]int)
	}
	p.failArmed.Store(true)
	p.everyOn.Store(true)
	return nil
}

// StopFailing turns [Proxy.FailCommits] and [Proxy.FailEveryCommitOnce] off and
// forgets the transactions FailEveryCommitOnce has seen. A COMMIT whose failure is
// under way still fails.
func (p *Proxy) StopFailing() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopFailingLocked()
}

func (p *Proxy) stopFailingLocked() {
	p.failN, p.failCode, p.everyCode, p.everyCounts = 0, "", "", nil
	p.failArmed.Store(false)
	p.everyOn.Store(false)
}

// badArgument reports a bad argument to a fault method: it fails the test of a proxy
// from New, and is returned for one from Start.
func (p *Proxy) badArgument(method string, err error) error {
	err = fmt.Errorf("pgtxtest: Proxy.%s: %w: %w", method, pgtx.ErrInvalidArgument, err)
	if p.tb != nil {
		p.tb.Helper()
		p.tb.Fatal(err)
	}
	return err
}

// commitFailure decides whether a COMMIT fails, and with which code. fp is the
// fingerprint of its transaction, nil when none was taken.
func (p *Proxy) commitFailure(fp *[sha256.Size]byte) (string, bool) {
	if !p.failArmed.Load() {
		return "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return "", false
	case p.failN != 0:
		if p.failN > 0 {
			p.failN--
		}
		code := p.failCode
		if p.failN == 0 && p.everyCode == "" {
			p.failArmed.Store(false)
		}
		return code, true
	case p.everyCode != "" && fp != nil:
		seen := p.everyCounts[*fp]
		p.everyCounts[*fp] = seen + 1
		return p.everyCode, seen%2 == 0
	}
	return "", false
}

// SlowStatements holds every statement matched by match (nil matches every one)
// for d before forwarding it to the server, as a slow network or a slow server
// would make it take d longer, until [Proxy.Reset] or Close; d <= 0 does nothing.
// Rules add up: a statement matched by several waits for the longest. A simple
// Query is held whole; in the extended protocol, the Execute of a portal whose
// statement matches is held (with what the client sent after it), and a Parse or
// Bind is not. [Stats].SlowedStatements counts the statements held.
//
// The server does not see the statement while it is held, so a cancel the client
// sends meanwhile (a CancelRequest, or pg_cancel_backend on another connection)
// finds the backend idle and does nothing: what ends the client's wait is its own
// deadline, for example the connection being closed when its context ends, as pgx
// does by default. A held statement is forwarded when d has passed, unless the
// connection is cut, stalled or closed first; Reset stops new holds, not one under
// way.
func (p *Proxy) SlowStatements(match func(sql string) bool, d time.Duration) {
	if d <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slowRules = append(p.slowRules, slowRule{match: match, d: d})
	p.slowOn.Store(true)
}

// slowRule is one SlowStatements rule.
type slowRule struct {
	match func(string) bool
	d     time.Duration
}

// slowFor returns how long to hold sql. Matchers run without p.mu held.
func (p *Proxy) slowFor(sql string) time.Duration {
	if !p.slowOn.Load() {
		return 0
	}
	p.mu.Lock()
	rules := slices.Clone(p.slowRules)
	p.mu.Unlock()
	var d time.Duration
	for _, r := range rules {
		if r.d > d && (r.match == nil || r.match(sql)) {
			d = r.d
		}
	}
	return d
}

// injection is a failed COMMIT whose answers the relay is rewriting.
type injection struct {
	phase int // injectAwaitError, injectAwaitRollback or injectAwaitReady
}

// The phases of an injection, in the server's answers.
const (
	// The error the DO block raises: forwarded, without its PL/pgSQL context.
	injectAwaitError = iota
	// The ReadyForQuery after it (and, in the extended protocol, after the
	// client's Sync), and ROLLBACK's CommandComplete: swallowed.
	injectAwaitRollback
	// The ReadyForQuery after ROLLBACK ("idle"): forwarded, the injection is over.
	injectAwaitReady
)

// injections is a connection's queue of injections, in the order of their
// answers.
type injections struct {
	mu sync.Mutex
	q  []*injection
}

func (in *injections) push() {
	in.mu.Lock()
	in.q = append(in.q, &injection{})
	in.mu.Unlock()
}

// rewrite applies the first pending injection to the server message m and returns
// what to forward in its place, nil for nothing; with no injection pending it
// returns m.
func (in *injections) rewrite(m []byte) []byte {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.q) == 0 {
		return m
	}
	inj := in.q[0]
	switch typ := m[0]; {
	case inj.phase == injectAwaitError && typ == 'E':
		inj.phase = injectAwaitRollback
		return cleanInjectedError(m)
	case inj.phase == injectAwaitRollback && typ == 'Z':
		return nil
	case inj.phase == injectAwaitRollback && typ == 'C':
		if tag, _, _ := cstring(m[5:]); tag == "ROLLBACK" {
			inj.phase = injectAwaitReady
		}
		return nil
	case inj.phase == injectAwaitReady && typ == 'Z':
		in.q = in.q[1:]
		return m
	}
	return m
}

// pending reports whether an injection awaits answers.
func (in *injections) pending() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.q) > 0
}

// cleanInjectedError removes from the server's ErrorResponse m, when it is the
// injected error, what shows that a DO block raised it: its context, and the
// source file, line and routine.
func cleanInjectedError(m []byte) []byte {
	var e pgproto3.ErrorResponse
	if err := e.Decode(m[5:]); err != nil || !strings.HasPrefix(e.Message, failedByProxy) {
		return m
	}
	e.Where, e.File, e.Line, e.Routine = "", "", 0, ""
	out, err := e.Encode(nil)
	if err != nil {
		return m
	}
	return out
}

// The kinds of statement that matter to a transaction's fingerprint and to
// failing its COMMIT.
const (
	stmtOther  = iota
	stmtBegin  // BEGIN or START TRANSACTION: a fingerprint starts after it
	stmtCommit // a COMMIT that FailCommits can fail
	stmtEnd    // any other end of a transaction: ROLLBACK, ABORT, other COMMITs
	// SAVEPOINT, RELEASE or ROLLBACK TO: fingerprinted without the name
	// when alone ([savepointOp])
	stmtSavepoint
)

// statementKind classifies sql by its first statement.
func statementKind(sql string) int {
	s := skipNoise(sql, true)
	word, rest := leadingWord(s)
	switch strings.ToLower(word) {
	case "begin":
		return stmtBegin
	case "start":
		if next, _ := leadingWord(skipNoise(rest, false)); strings.EqualFold(next, "transaction") {
			return stmtBegin
		}
	case "savepoint", "release":
		return stmtSavepoint
	case "rollback":
		r := skipOptionalWord(skipOptionalWord(rest, "work"), "transaction")
		if to, _ := leadingWord(skipNoise(r, false)); strings.EqualFold(to, "to") {
			return stmtSavepoint
		}
		return stmtEnd
	case "abort":
		return stmtEnd
	case "commit", "end":
		if !IsCommit(s) {
			return stmtOther
		}
		if loneCommit(rest) {
			return stmtCommit
		}
		return stmtEnd
	}
	return stmtOther
}

// loneCommit reports whether rest, what follows COMMIT or END, ends a plain
// commit that is the only statement: [WORK | TRANSACTION] [AND NO CHAIN].
func loneCommit(rest string) bool {
	var words []string
	for {
		rest = skipNoise(rest, false)
		if rest == "" || rest[0] == ';' {
			break
		}
		word, r := leadingWord(rest)
		if word == "" {
			return false
		}
		words = append(words, strings.ToLower(word))
		rest = r
	}
	if len(words) > 0 && (words[0] == "work" || words[0] == "transaction") {
		words = words[1:]
	}
	if len(words) > 0 && !slices.Equal(words, []string{"and", "no", "chain"}) {
		return false
	}
	if rest != "" {
		rest = skipNoise(rest[1:], true)
	}
	return rest == ""
}
