package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest"
)

// TestMain checks for goroutines the tests leaked.
func TestMain(m *testing.M) { pgtxtest.Main(m) }

func TestJudgeHoldsAnswersAgainstTheLedger(t *testing.T) {
	t.Parallel()
	tr := func(id int64, amount int) transferReq { return transferReq{id: id, from: 1, to: 2, amount: amount} }
	outcomes := []outcome{
		{t: tr(1, 5), done: true},                                   // applied once: right
		{t: tr(2, 7), done: true},                                   // applied twice: doubled
		{t: tr(3, 3), done: true, gaveUp: true, k: kindConflict},    // swallowed, never applied: lost
		{t: tr(4, 4), gaveUp: true, k: kindConnection},              // reported failed, yet applied: hidden
		{t: tr(5, 6), gaveUp: true, k: kindTimeout},                 // reported failed, not applied: right
		{t: tr(6, 2), unknown: true, gaveUp: true, k: kindUnknown},  // unknown, applied: allowed
		{t: tr(7, 2), unknown: true, gaveUp: true, k: kindUnknown},  // unknown, not applied: allowed
		{t: tr(8, 9), done: true, attempts: 3},                      // applied once after retries: right
		{t: tr(9, 1), gaveUp: true, k: kindOther},                   // failed before it ran: right
		{t: tr(10, 8), done: true, gaveUp: true, k: kindTimeout},    // swallowed, yet applied: right by luck
		{t: tr(11, 2), gaveUp: true, k: kindConnection},             // hidden
		{t: tr(12, 3), done: true, gaveUp: true, k: kindConnection}, // lost
		{t: tr(13, 1), done: true, attempts: 2},                     // applied three times: doubled
	}
	applied := map[int64]int{1: 1, 2: 2, 4: 1, 6: 1, 8: 1, 10: 1, 11: 1, 13: 3, 99: 1}
	b := books{applied: applied, total: 500, want: 500}
	r := judge("loop", outcomes, b, 4)

	if r.doubled != 2 || r.doubledSum != 7+2*1 {
		t.Errorf("doubled %d (%d), want 2 (9)", r.doubled, r.doubledSum)
	}
	if r.lost != 2 || r.lostSum != 3+3 {
		t.Errorf("lost %d (%d), want 2 (6)", r.lost, r.lostSum)
	}
	if r.hidden != 2 || r.hidSum != 4+2 {
		t.Errorf("hidden %d (%d), want 2 (6)", r.hidden, r.hidSum)
	}
	if r.stray != 1 {
		t.Errorf("stray %d, want 1 (transfer 99)", r.stray)
	}
	if r.transfers != len(outcomes) || r.applied != len(applied)-1 {
		t.Errorf("transfers %d, applied %d; want %d, %d", r.transfers, r.applied, len(outcomes), len(applied)-1)
	}
	if r.kept() {
		t.Error("kept() with doubled, lost and hidden transfers")
	}
	if b.applied[2] != 2 {
		t.Error("judge changed the books")
	}
}

func TestJudgeKeptWhenEveryAnswerIsRight(t *testing.T) {
	t.Parallel()
	outcomes := []outcome{
		{t: transferReq{id: 1, amount: 3}, done: true, attempts: 2},
		{t: transferReq{id: 2, amount: 3}, gaveUp: true, k: kindConflict, attempts: 11},
		{t: transferReq{id: 3, amount: 3}, unknown: true, gaveUp: true, k: kindUnknown, attempts: 1},
	}
	for _, applied := range []map[int64]int{{1: 1}, {1: 1, 3: 1}} {
		r := judge("pgtx", outcomes, books{applied: applied, total: 10, want: 10}, 1)
		if !r.kept() {
			t.Errorf("applied %v: not kept: %s", applied, r.damage())
		}
	}
	for name, b := range map[string]books{
		"total changed":     {applied: map[int64]int{1: 1}, total: 9, want: 10},
		"balances drifted":  {applied: map[int64]int{1: 1}, total: 10, want: 10, drift: 2},
		"done, not applied": {applied: map[int64]int{}, total: 10, want: 10},
	} {
		if judge("pgtx", outcomes, b, 0).kept() {
			t.Errorf("%s: kept", name)
		}
	}
}

func TestVerdictFailsOnlyWhenPgtxBrokeTheInvariant(t *testing.T) {
	t.Parallel()
	good := books{applied: map[int64]int{1: 1}, total: 10, want: 10}
	twice := books{applied: map[int64]int{1: 2}, total: 10, want: 10}
	done := []outcome{{t: transferReq{id: 1, amount: 4}, done: true}}

	line, kept := verdict([]tally{judge("naive retry loop", done, twice, 0), judge("pgtx", done, good, 0)})
	if !kept || !strings.HasPrefix(line, "pgtx kept the invariant") || !strings.Contains(line, "naive retry loop: 1 applied twice (+4)") {
		t.Errorf("verdict = %q, %v", line, kept)
	}
	line, kept = verdict([]tally{judge("pgtx", done, twice, 0)})
	if kept || !strings.HasPrefix(line, "pgtx BROKE the invariant: 1 applied twice") {
		t.Errorf("verdict = %q, %v", line, kept)
	}
	if line, kept = verdict([]tally{judge("pgx.BeginTxFunc", done, good, 0)}); !kept || !strings.HasPrefix(line, "pgtx did not run") {
		t.Errorf("verdict = %q, %v", line, kept)
	}
}

func TestKindOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want kind
	}{
		{&pgconn.PgError{Code: "40001"}, kindConflict},
		{fmt.Errorf("commit: %w", &pgconn.PgError{Code: "40P01"}), kindConflict},
		{context.DeadlineExceeded, kindTimeout},
		{&pgconn.PgError{Code: "57014"}, kindTimeout},
		{io.ErrUnexpectedEOF, kindConnection},
		{fmt.Errorf("pgtx: %w", pgtx.ErrCommitUnknown), kindUnknown},
		{insufficientFunds{account: 1}, kindOther},
		{&pgconn.PgError{Code: "23514"}, kindOther},
	}
	for _, tc := range tests {
		if got := kindOf(tc.err); got != tc.want {
			t.Errorf("kindOf(%v) = %s, want %s", tc.err, kindNames()[got], kindNames()[tc.want])
		}
	}
}

func TestRedactHidesThePassword(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"postgres://u:secret@h:5432/db":                 "postgres://u:xxxxx@h:5432/db",
		"postgres://u@h/db?password=secret&sslmode=off": "postgres://u@h/db?password=xxxxx&sslmode=off",
		"postgresql://u@h/db":                           "postgresql://u@h/db",
		"host=h user=u password=secret dbname=db":       "host=h user=u password=xxxxx dbname=db",
		"host=h password = 'se cret\\' x' dbname=db":    "host=h password = xxxxx dbname=db",
		"postgres://u:secret@h:port/db":                 "(a URL that does not parse)",
	}
	for dsn, want := range tests {
		got := redact(dsn)
		if got != want {
			t.Errorf("redact(%q) = %q, want %q", dsn, got, want)
		}
		if strings.Contains(got, "secret") || strings.Contains(got, "cret") {
			t.Errorf("redact(%q) = %q shows the password", dsn, got)
		}
	}
}

func TestProxyOnlyBeforeALocalTCPServer(t *testing.T) {
	t.Parallel()
	tests := map[string]bool{ // DSN: a proxy may stand before it
		"postgres://u@127.0.0.1:5432/db":           true,
		"postgres://u@localhost:5432/db":           true,
		"postgres://u@[::1]:5432/db":               true,
		"host=127.0.0.1 port=6000 user=u":          true,
		"postgres://u@db.example:5432/db":          false,
		"postgres://u@10.0.0.7/db":                 false,
		"host=/var/run/postgresql user=u":          false,
		"postgres://u@127.0.0.1:1,127.0.0.1:2/db":  false,
		"postgres://u@127.0.0.1/db?sslmode=prefer": true,
	}
	for dsn, want := range tests {
		why := proxyRefusal(dsn)
		if (why == "") != want {
			t.Errorf("proxyRefusal(%q) = %q, want a proxy: %v", dsn, why, want)
		}
	}
}

func TestViaProxyKeepsTheRest(t *testing.T) {
	t.Parallel()
	cfg, err := pgconn.ParseConfig("postgres://u:pw@127.0.0.1:5432/bank?sslmode=prefer&application_name=x")
	if err != nil {
		t.Fatal(err)
	}
	if err := viaProxy(cfg, "127.0.0.1:40000"); err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "127.0.0.1" || cfg.Port != 40000 || cfg.User != "u" || cfg.Password != "pw" || cfg.Database != "bank" {
		t.Errorf("config after viaProxy: %s:%d user %s database %s", cfg.Host, cfg.Port, cfg.User, cfg.Database)
	}
	for _, f := range cfg.Fallbacks {
		if f.Host != "127.0.0.1" || f.Port != 40000 {
			t.Errorf("a fallback still goes to %s:%d", f.Host, f.Port)
		}
	}
	if err := viaProxy(cfg, "no port"); err == nil {
		t.Error("viaProxy accepted an address without a port")
	}
}

func TestEveryLoopDrawsTheSameTransfers(t *testing.T) {
	t.Parallel()
	a, b := rand.New(rand.NewPCG(3, 42)), rand.New(rand.NewPCG(3, 42))
	slow := 0
	for i := range int64(2000) {
		x, y := nextTransfer(a, i, 5, 250), nextTransfer(b, i, 5, 250)
		if x != y {
			t.Fatalf("transfer %d: %+v and %+v", i, x, y)
		}
		if x.from == x.to || x.from < 1 || x.from > 5 || x.to < 1 || x.to > 5 || x.amount < 1 || x.amount > 10 {
			t.Fatalf("transfer %+v", x)
		}
		if x.check > 0 {
			slow++
		}
	}
	if slow < 2000/slowShare/2 || slow > 2000/slowShare*2 {
		t.Errorf("%d slow transfers of 2000, want about %d", slow, 2000/slowShare)
	}
}

// TestFailuresSayWhichNeverRan: a transfer whose deadline passed before its
// first try counts no try, and the failed column says how many did so.
func TestFailuresSayWhichNeverRan(t *testing.T) {
	t.Parallel()
	outcomes := []outcome{
		{t: transferReq{id: 1, amount: 3}, gaveUp: true, k: kindTimeout},
		{t: transferReq{id: 2, amount: 3}, gaveUp: true, k: kindTimeout, attempts: 1},
		{t: transferReq{id: 3, amount: 3}, gaveUp: true, k: kindConflict, attempts: 3},
	}
	r := judge("pgtx", outcomes, books{applied: map[int64]int{}}, 0)
	if got, want := r.failures(), "conflict 1, timeout 2 (1 before a try)"; got != want {
		t.Errorf("failures() = %q, want %q", got, want)
	}
}
