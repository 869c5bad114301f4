package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// pgbenchScript is the transfer workload of contention.go (transfer,
// updateBoth) as a pgbench script; -D accounts=N and -D ordered=0|1 set its
// variables. pgbench retries a transaction that failed with 40001 or 40P01
// from the top of the script with the same random values, as a Go contender
// retries its closure with the same from, to and amount; unlike the Go
// contenders, it retries at once, without any backoff.
//
// The Go transfer returns errInsufficient when the balance read is smaller
// than the amount. pgbench cannot branch on a query's result without \gset
// and a round of meta-commands per transaction, so the script reads the
// balance (the read that makes SERIALIZABLE track it) and does not check it:
// balances start at 1,000,000 and amounts are 1..10, so no transfer of a
// benchmark run can find too little money, and the check would never fire.
const pgbenchScript = `\set from random(1, :accounts)
\set to random(1, :accounts - 1)
\if :to >= :from
\set to :to + 1
\endif
\set amount random(1, 10)
\if :ordered
\set first least(:from, :to)
\else
\set first :from
\endif
\set second :from + :to - :first
\set firstdelta case when :first = :from then -:amount else :amount end
\set seconddelta -:firstdelta
begin isolation level serializable;
select balance from bench_accounts where id = :from;
update bench_accounts set balance = balance + :firstdelta, n = n + 1 where id = :first;
update bench_accounts set balance = balance + :seconddelta, n = n + 1 where id = :second;
commit;
`

// pgbenchMinMajor is the first PostgreSQL release whose pgbench has
// --max-tries and --failures-detailed.
const pgbenchMinMajor = 15

// pgbenchRun is what one pgbench run measured.
type pgbenchRun struct {
	Processed int64 // transactions processed (committed), from pgbench's summary
	Failed    int64 // failed transactions (gave up after --max-tries)
	// SerializationFailures and DeadlockFailures split Failed by the error
	// of the last try (40001, 40P01), from --failures-detailed.
	SerializationFailures int64
	DeadlockFailures      int64
	Retried               int64   // transactions retried at least once
	Retries               int64   // total number of retries
	TPS                   float64 // pgbench's tps, without initial connection time
	// Duration is the time pgbench divided Processed by to get TPS: from the
	// first client's start of benchmarking, after the connections were
	// made, to the end of the last transaction. pgbench prints only its tps,
	// so Duration is Processed/TPS; it is -T when nothing committed.
	Duration time.Duration
	// P50 and P99 are latency percentiles of the transactions that
	// committed, from the per-transaction log (-l): a transaction's time
	// runs from its first try's start to its commit, retries included.
	P50, P99 time.Duration
}

// runPgbench runs pgbench on dsn with workers clients for dur (rounded up to
// whole seconds, at least 1s: pgbench's -T takes seconds) on the accounts of
// bench_accounts, ordered or random variant, SERIALIZABLE,
// --max-tries=maxTries, prepared statements (-M prepared, as pgx's default
// statement cache), no vacuum (-n), threads = min(workers, runtime.NumCPU()).
//
// The table must exist with ids 1..accounts (setupAccounts). pgbench's
// sessions take the database's settings as any new session does, so
// setDeadlockTimeout applies to them too.
func runPgbench(ctx context.Context, dsn string, workers, accounts int, ordered bool, dur time.Duration, maxTries int) (pgbenchRun, error) {
	switch {
	case workers < 1:
		return pgbenchRun{}, fmt.Errorf("pgbench: workers must be at least 1, not %d", workers)
	case accounts < 2:
		return pgbenchRun{}, fmt.Errorf("pgbench: a transfer needs at least 2 accounts, not %d", accounts)
	case maxTries < 1:
		// pgbench's --max-tries=0 means no limit but needs -L or -T to
		// stop; the Go contenders always have a limit, so it is refused.
		return pgbenchRun{}, fmt.Errorf("pgbench: maxTries must be at least 1, not %d", maxTries)
	case strings.TrimSpace(dsn) == "":
		return pgbenchRun{}, errors.New("pgbench: empty DSN")
	}
	bin, err := findPgbench()
	if err != nil {
		return pgbenchRun{}, err
	}
	dir, err := os.MkdirTemp("", "pgbench-")
	if err != nil {
		return pgbenchRun{}, fmt.Errorf("pgbench: %w", err)
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "transfer.sql")
	if err := os.WriteFile(script, []byte(pgbenchScript), 0o600); err != nil {
		return pgbenchRun{}, fmt.Errorf("pgbench: %w", err)
	}
	seconds := pgbenchSeconds(dur)
	args := pgbenchArgs(dsn, script, filepath.Join(dir, "tx"), workers, accounts, ordered, seconds, maxTries)

	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = pgbenchEnv()
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	// The kill on cancellation leaves pgbench's pipes to close; do not wait
	// for ever on a child that would hold them.
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return pgbenchRun{}, fmt.Errorf("pgbench: %w", ctx.Err())
	}
	if runErr != nil {
		return pgbenchRun{}, fmt.Errorf("pgbench on %s (%d clients, %s, -T %d, --max-tries=%d): %w; stderr: %s",
			redacted(dsn), workers, pgbenchVariant(ordered), seconds, maxTries, runErr, lastLines(stderr.Bytes(), 8))
	}

	r, err := parsePgbenchSummary(stdout.String(), maxTries)
	switch {
	case errors.Is(err, errNothingProcessed) && r.Failed == 0:
		// pgbench exited normally with nothing done within -T (128 clients
		// still connecting in a 1s short run): a tps of 0, not an error. A
		// run whose clients aborted exits non-zero, refused above.
	case err != nil:
		return pgbenchRun{}, fmt.Errorf("%w; stderr: %s", err, lastLines(stderr.Bytes(), 8))
	}
	if r.Processed > 0 && r.TPS > 0 {
		// pgbench measures in microseconds; finer digits are float noise.
		r.Duration = time.Duration(float64(r.Processed) / r.TPS * float64(time.Second)).Round(time.Microsecond)
	} else {
		r.Duration = time.Duration(seconds) * time.Second
	}

	lat, failed, err := readPgbenchLogs(dir, "tx")
	if err != nil {
		return pgbenchRun{}, err
	}
	// Both counts come from the same pgbench; a difference means the log or
	// the summary was misread, and the percentiles would be of the wrong
	// transactions.
	if int64(len(lat)) != r.Processed || failed != r.Failed {
		return pgbenchRun{}, fmt.Errorf("pgbench: the transaction log has %d committed and %d failed transactions, the summary %d and %d",
			len(lat), failed, r.Processed, r.Failed)
	}
	r.P50, r.P99 = percentile(lat, .5), percentile(lat, .99)
	return r, nil
}

// pgbenchSeconds is dur for -T: whole seconds, rounded up, at least 1.
func pgbenchSeconds(dur time.Duration) int {
	return max(1, int((dur+time.Second-1)/time.Second))
}

// pgbenchArgs is pgbench's command line. The DSN goes last, after "--", so
// that it is the dbname argument whatever it starts with; pgbench hands it
// to libpq as a connection string, whose values override PGHOST, PGPORT and
// PGUSER as they would in any libpq program.
func pgbenchArgs(dsn, script, logPrefix string, workers, accounts int, ordered bool, seconds, maxTries int) []string {
	ord := "0"
	if ordered {
		ord = "1"
	}
	return []string{
		"-n",
		"-M", "prepared",
		"-c", strconv.Itoa(workers),
		"-j", strconv.Itoa(min(workers, runtime.NumCPU())),
		"-T", strconv.Itoa(seconds),
		"--max-tries=" + strconv.Itoa(maxTries),
		"--failures-detailed",
		"-l", "--log-prefix=" + logPrefix,
		"-D", "accounts=" + strconv.Itoa(accounts),
		"-D", "ordered=" + ord,
		"-f", script,
		"--", dsn,
	}
}

// pgbenchVariant names the variant for error messages.
func pgbenchVariant(ordered bool) string {
	if ordered {
		return variantOrdered
	}
	return variantRandom
}

// pgbenchEnv is the environment pgbench runs in: the caller's, less
// PGCLUSTER. On Debian, pgbench on PATH is pg_wrapper, which reads
// PGCLUSTER to pick both the pgbench version and, when PGHOST is unset, a
// local cluster's host and port; that is not libpq's behaviour, and it
// should not choose what the benchmark measures. The PG* variables libpq
// reads (PGPASSWORD, PGSSLMODE, PGOPTIONS, ...) keep their usual effect, for
// what the DSN does not set.
func pgbenchEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PGCLUSTER=")
	})
}

// findPgbench returns the path of a pgbench of PostgreSQL 15 or later:
// $PGBENCH if set, else `pgbench` on PATH, else the highest-versioned
// /usr/lib/postgresql/*/bin/pgbench; an error naming what was tried otherwise
// (pgbench 14 and earlier have no --max-tries: check `pgbench --version`).
func findPgbench() (string, error) {
	if p := os.Getenv("PGBENCH"); p != "" {
		if err := checkPgbench(p); err != nil {
			return "", fmt.Errorf("pgbench: PGBENCH=%s: %w", p, err)
		}
		return p, nil
	}
	var tried []string
	if p, err := exec.LookPath("pgbench"); err != nil {
		tried = append(tried, "pgbench on PATH: not found")
	} else if err := checkPgbench(p); err != nil {
		tried = append(tried, p+": "+err.Error())
	} else {
		return p, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	if len(found) == 0 {
		tried = append(tried, "/usr/lib/postgresql/*/bin/pgbench: none")
	}
	// Highest version first; a broken install falls through to the next.
	slices.SortFunc(found, func(a, b string) int {
		return compareVersions(libVersion(b), libVersion(a))
	})
	for _, p := range found {
		if err := checkPgbench(p); err != nil {
			tried = append(tried, p+": "+err.Error())
			continue
		}
		return p, nil
	}
	return "", fmt.Errorf("pgbench: no pgbench of PostgreSQL %d or later (the first with --max-tries); tried %s; set PGBENCH to one",
		pgbenchMinMajor, strings.Join(tried, "; "))
}

// libVersion is the version directory of /usr/lib/postgresql/<v>/bin/pgbench.
func libVersion(path string) string {
	return filepath.Base(filepath.Dir(filepath.Dir(path)))
}

// compareVersions compares dotted version numbers ("9.6", "15") part by
// part, numerically; a part that is not a number counts as 0.
func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if c := x - y; c != 0 {
			return c
		}
	}
	return 0
}

// checkPgbench runs path --version and says why it will not do, if it will
// not.
func checkPgbench(path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Env = pgbenchEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("--version: %w: %s", err, lastLines(out, 3))
	}
	major, err := pgbenchMajor(string(out))
	if err != nil {
		return err
	}
	if major < pgbenchMinMajor {
		return fmt.Errorf("PostgreSQL %d, has no --max-tries", major)
	}
	return nil
}

// pgbenchVersionRE matches the output of pgbench --version, e.g. "pgbench
// (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)" or "pgbench (PostgreSQL)
// 17devel".
var pgbenchVersionRE = regexp.MustCompile(`(?m)^pgbench \(PostgreSQL\) (\d+)`)

// pgbenchMajor is the major version in the output of pgbench --version.
func pgbenchMajor(out string) (int, error) {
	m := pgbenchVersionRE.FindStringSubmatch(out)
	if m == nil {
		first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
		return 0, fmt.Errorf("--version printed %q, not pgbench (PostgreSQL) <version>", first)
	}
	return strconv.Atoi(m[1])
}
