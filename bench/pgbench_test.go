package main

import (
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The outputs below are those of pgbench 15.18 running pgbenchScript on a
// local server for 1s, the script's path aside.

const summaryOrdered = `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: /tmp/pgbench-1/transfer.sql
scaling factor: 1
query mode: prepared
number of clients: 8
number of threads: 2
maximum number of tries: 11
duration: 1 s
number of transactions actually processed: 2614
number of failed transactions: 25 (0.947%)
number of serialization failures: 25 (0.947%)
number of deadlock failures: 0 (0.000%)
number of transactions retried: 1405 (53.240%)
total number of retries: 3613
latency average = 3.021 ms (including failures)
initial connection time = 14.938 ms
tps = 2622.683706 (without initial connection time)
`

// summaryOneTry is a run with --max-tries=1: no lines about retries.
const summaryOneTry = `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: /tmp/pgbench-1/transfer.sql
scaling factor: 1
query mode: prepared
number of clients: 2
number of threads: 2
maximum number of tries: 1
duration: 1 s
number of transactions actually processed: 4458
number of failed transactions: 4319 (49.208%)
number of serialization failures: 4319 (49.208%)
number of deadlock failures: 0 (0.000%)
latency average = 0.227 ms (including failures)
initial connection time = 4.386 ms
tps = 4476.784588 (without initial connection time)
`

// summaryAborted is a run whose clients all aborted on an SQL error.
const summaryAborted = `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: /tmp/pgbench-1/transfer.sql
scaling factor: 1
query mode: prepared
number of clients: 8
number of threads: 2
maximum number of tries: 11
duration: 1 s
number of transactions actually processed: 0
number of failed transactions: 0 (NaN%)
number of serialization failures: 0 (NaN%)
number of deadlock failures: 0 (NaN%)
number of transactions retried: 0 (NaN%)
total number of retries: 0
`

func TestParsePgbenchSummary(t *testing.T) {
	r, err := parsePgbenchSummary(summaryOrdered, 11)
	if err != nil {
		t.Fatal(err)
	}
	want := pgbenchRun{Processed: 2614, Failed: 25, SerializationFailures: 25, Retried: 1405, Retries: 3613, TPS: 2622.683706}
	if r != want {
		t.Errorf("got %+v, want %+v", r, want)
	}
}

func TestParsePgbenchSummaryOneTry(t *testing.T) {
	r, err := parsePgbenchSummary(summaryOneTry, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := pgbenchRun{Processed: 4458, Failed: 4319, SerializationFailures: 4319, TPS: 4476.784588}
	if r != want {
		t.Errorf("got %+v, want %+v", r, want)
	}
	// With more than one try, the retry lines are required.
	if _, err := parsePgbenchSummary(summaryOneTry, 2); err == nil || !strings.Contains(err.Error(), "number of transactions retried:") {
		t.Errorf("maxTries 2 without retry lines: err = %v, want one naming the retried line", err)
	}
}

func TestParsePgbenchSummaryMissingLine(t *testing.T) {
	for _, line := range []string{
		"number of transactions actually processed:",
		"number of failed transactions:",
		"number of serialization failures:",
		"number of deadlock failures:",
		"number of transactions retried:",
		"total number of retries:",
		"tps =",
	} {
		var kept []string
		for l := range strings.Lines(summaryOrdered) {
			if !strings.HasPrefix(l, line) {
				kept = append(kept, l)
			}
		}
		_, err := parsePgbenchSummary(strings.Join(kept, ""), 11)
		if err == nil || !strings.Contains(err.Error(), line) {
			t.Errorf("without %q: err = %v, want one naming it", line, err)
		}
	}
}

func TestParsePgbenchSummaryAborted(t *testing.T) {
	r, err := parsePgbenchSummary(summaryAborted, 11)
	if err == nil || !strings.Contains(err.Error(), "tps =") || !strings.Contains(err.Error(), "no transaction was processed") {
		t.Errorf("err = %v, want one naming the tps line and saying nothing was processed", err)
	}
	// runPgbench takes such a run, when pgbench exited normally, as a tps
	// of 0: the error says so, and the counts come with it.
	if !errors.Is(err, errNothingProcessed) || r.Processed != 0 || r.Failed != 0 || r.TPS != 0 {
		t.Errorf("got %+v, %v; want the zero counts and an error matching errNothingProcessed", r, err)
	}
}

func TestParsePgbenchSummaryBadNumber(t *testing.T) {
	out := strings.Replace(summaryOrdered, "tps = 2622.683706", "tps = fast", 1)
	if _, err := parsePgbenchSummary(out, 11); err == nil || !strings.Contains(err.Error(), "tps = fast") {
		t.Errorf("err = %v, want one quoting the line", err)
	}
}

// logLines are lines of a per-transaction log: client_id transaction_no
// time script_no time_epoch time_us retries. The deadlock line is a
// serialization line with its kind changed: a transaction whose 11 tries all
// failed, the last on a deadlock, is too rare to catch in a short run.
const logLines = `0 1 7295 0 1796142842 570333 0
2 1 9768 0 1796142842 573286 0
1 1 10264 0 1796142842 573577 1
0 9 serialization 0 1796142841 597736 10
4 3 deadlock 0 1796142841 624613 10
5 2 3686 0 1796142841 550748 0
`

func TestParsePgbenchLog(t *testing.T) {
	lat, failed, err := parsePgbenchLog(strings.NewReader(logLines))
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{7295 * time.Microsecond, 9768 * time.Microsecond, 10264 * time.Microsecond, 3686 * time.Microsecond}
	if len(lat) != len(want) {
		t.Fatalf("got %v, want %v", lat, want)
	}
	for i := range want {
		if lat[i] != want[i] {
			t.Errorf("latency %d = %v, want %v", i, lat[i], want[i])
		}
	}
	if failed != 2 {
		t.Errorf("failed = %d, want 2", failed)
	}
}

func TestParsePgbenchLogMalformed(t *testing.T) {
	for _, in := range []string{
		"0 1 7295 0\n",                        // too few fields
		"0 1 7.5 0 1796142842 570333 0\n",     // not microseconds
		"0 1 timeout 0 1796142842 570333 0\n", // unknown failure
	} {
		if _, _, err := parsePgbenchLog(strings.NewReader(in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestPgbenchMajor(t *testing.T) {
	for out, want := range map[string]int{
		"pgbench (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n": 15,
		"pgbench (PostgreSQL) 17devel\n":                        17,
		"pgbench (PostgreSQL) 14.9\n":                           14,
		"pgbench (PostgreSQL) 9.6.24\n":                         9,
	} {
		got, err := pgbenchMajor(out)
		if err != nil || got != want {
			t.Errorf("%q: got %d, %v; want %d", out, got, err, want)
		}
	}
	if _, err := pgbenchMajor("true (GNU coreutils) 9.1\n"); err == nil {
		t.Error("not pgbench: no error")
	}
}

func TestCompareVersions(t *testing.T) {
	for _, c := range []struct {
		a, b string
		sign int
	}{
		{"9.6", "15", -1},
		{"15", "9.6", 1},
		{"15", "16", -1},
		{"15", "15", 0},
		{"10", "9.6", 1},
	} {
		got := compareVersions(c.a, c.b)
		if (got > 0) != (c.sign > 0) || (got < 0) != (c.sign < 0) {
			t.Errorf("compareVersions(%q, %q) = %d, want sign %d", c.a, c.b, got, c.sign)
		}
	}
}

func TestPgbenchSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{
		0:                       1,
		-time.Second:            1,
		time.Millisecond:        1,
		time.Second:             1,
		time.Second + 1:         2,
		1500 * time.Millisecond: 2,
		10 * time.Second:        10,
	} {
		if got := pgbenchSeconds(d); got != want {
			t.Errorf("pgbenchSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestPgbenchArgs(t *testing.T) {
	const dsn = "postgres://u@127.0.0.1:5432/db?sslmode=disable"
	args := pgbenchArgs(dsn, "/d/transfer.sql", "/d/tx", 32, 10, false, 3, 11)
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"-n", "-M prepared", "-c 32", "-j " + strconv.Itoa(min(32, runtime.NumCPU())), "-T 3",
		"--max-tries=11", "--failures-detailed", "-l --log-prefix=/d/tx",
		"-D accounts=10", "-D ordered=0", "-f /d/transfer.sql",
	} {
		if !strings.Contains(" "+joined+" ", " "+want+" ") {
			t.Errorf("args %q lack %q", joined, want)
		}
	}
	if n := len(args); n < 2 || args[n-2] != "--" || args[n-1] != dsn {
		t.Errorf("args %q do not end with -- and the DSN", joined)
	}
	if got := pgbenchArgs(dsn, "s", "p", 1, 2, true, 1, 1); !strings.Contains(strings.Join(got, " "), "-j 1 ") || !strings.Contains(strings.Join(got, " "), "-D ordered=1") {
		t.Errorf("1 worker, ordered: %q", got)
	}
}

func TestRunPgbenchArguments(t *testing.T) {
	for _, c := range []struct {
		name                       string
		workers, accounts, retries int
		want                       string
	}{
		{"workers", 0, 10, 11, "workers"},
		{"accounts", 8, 1, 11, "accounts"},
		{"tries", 8, 10, 0, "maxTries"},
	} {
		_, err := runPgbench(t.Context(), "postgres://u@127.0.0.1:1/db", c.workers, c.accounts, true, time.Second, c.retries)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one about %s", c.name, err, c.want)
		}
	}
}
