package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// parsePgbenchSummary reads the figures of pgbench's summary on stdout, e.g.
//
//	number of transactions actually processed: 2614
//	number of failed transactions: 25 (0.947%)
//	number of serialization failures: 25 (0.947%)
//	number of deadlock failures: 0 (0.000%)
//	number of transactions retried: 1405 (53.240%)
//	total number of retries: 3613
//	tps = 2622.683706 (without initial connection time)
//
// Every line is required: a missing one is an error that names it, not a
// zero. The two lines about retries are the exception when maxTries is 1,
// as pgbench prints them only for other values.
func parsePgbenchSummary(out string, maxTries int) (pgbenchRun, error) {
	var r pgbenchRun
	fields := []struct {
		prefix string
		dst    *int64
	}{
		{"number of transactions actually processed: ", &r.Processed},
		{"number of failed transactions: ", &r.Failed},
		{"number of serialization failures: ", &r.SerializationFailures},
		{"number of deadlock failures: ", &r.DeadlockFailures},
		{"number of transactions retried: ", &r.Retried},
		{"total number of retries: ", &r.Retries},
	}
	const tpsPrefix, tpsSuffix = "tps = ", " (without initial connection time)"
	seen := make(map[string]bool)
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\r\n")
		if v, ok := strings.CutPrefix(line, tpsPrefix); ok {
			num, ok := strings.CutSuffix(v, tpsSuffix)
			if !ok {
				continue // "(including reconnection times)" under -C: not this run's
			}
			tps, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return pgbenchRun{}, fmt.Errorf("pgbench: summary line %q: %w", line, err)
			}
			r.TPS = tps
			seen[tpsPrefix] = true
			continue
		}
		for _, f := range fields {
			v, ok := strings.CutPrefix(line, f.prefix)
			if !ok {
				continue
			}
			// The count is followed by " (x%)", or by "/total" under -t.
			n, err := strconv.ParseInt(leadingDigits(v), 10, 64)
			if err != nil {
				return pgbenchRun{}, fmt.Errorf("pgbench: summary line %q: %w", line, err)
			}
			*f.dst = n
			seen[f.prefix] = true
		}
	}
	for _, f := range fields {
		optional := maxTries == 1 && (f.dst == &r.Retried || f.dst == &r.Retries)
		if !seen[f.prefix] && !optional {
			return pgbenchRun{}, missingLine(f.prefix, r.Processed, seen)
		}
	}
	if !seen[tpsPrefix] {
		err := missingLine(tpsPrefix+"X"+tpsSuffix, r.Processed, seen)
		if r.Processed == 0 {
			// pgbench prints no tps when nothing was processed: the
			// counts so far are returned with the error, for a caller
			// that knows the run ended normally.
			return r, errors.Join(errNothingProcessed, err)
		}
		return pgbenchRun{}, err
	}
	return r, nil
}

// errNothingProcessed is matched by the error of a summary of a run in which
// no transaction ended (and which therefore has no tps line).
var errNothingProcessed = errors.New("pgbench: no transaction was processed")

// missingLine is the error of a summary without the line that starts with
// prefix. pgbench 16 and later stop the summary before the failure lines
// when no transaction ended at all, which deserves saying.
func missingLine(prefix string, processed int64, seen map[string]bool) error {
	err := fmt.Errorf("pgbench: the summary has no %q line", strings.TrimSpace(prefix))
	if processed == 0 && seen["number of transactions actually processed: "] {
		err = fmt.Errorf("%w (no transaction was processed)", err)
	}
	return err
}

// leadingDigits is the run of ASCII digits s starts with.
func leadingDigits(s string) string {
	i := strings.IndexFunc(s, func(c rune) bool { return c < '0' || c > '9' })
	if i < 0 {
		return s
	}
	return s[:i]
}

// readPgbenchLogs reads the per-transaction logs pgbench wrote in dir under
// prefix: <prefix>.<pid> for its first thread and <prefix>.<pid>.<n> for
// the others.
func readPgbenchLogs(dir, prefix string) (committed []time.Duration, failed int64, err error) {
	files, err := filepath.Glob(filepath.Join(dir, prefix+".*"))
	if err != nil {
		return nil, 0, fmt.Errorf("pgbench: %w", err)
	}
	if len(files) == 0 {
		return nil, 0, fmt.Errorf("pgbench: wrote no transaction log %s.*", filepath.Join(dir, prefix))
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, 0, fmt.Errorf("pgbench: %w", err)
		}
		lat, n, err := parsePgbenchLog(f)
		f.Close()
		if err != nil {
			return nil, 0, fmt.Errorf("pgbench: %s: %w", filepath.Base(name), err)
		}
		committed = append(committed, lat...)
		failed += n
	}
	return committed, failed, nil
}

// parsePgbenchLog reads one per-transaction log, whose lines are
//
//	client_id transaction_no time script_no time_epoch time_us [ schedule_lag ] [ retries ]
//
// with time the transaction's latency in microseconds, retries included; a
// failed transaction has the kind of its failure there instead
// ("serialization", "deadlock", "other" with --failures-detailed, "failed"
// without). It returns the latencies of the committed transactions and the
// number of failed ones.
func parsePgbenchLog(r io.Reader) (committed []time.Duration, failed int64, err error) {
	sc := bufio.NewScanner(r)
	for lineNo := 1; sc.Scan(); lineNo++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 6 {
			return nil, 0, fmt.Errorf("line %d: %q has %d fields, not at least 6", lineNo, sc.Text(), len(f))
		}
		switch f[2] {
		case "serialization", "deadlock", "other", "failed":
			failed++
			continue
		case "skipped": // only under --rate with --latency-limit, never started
			continue
		}
		us, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || us < 0 {
			return nil, 0, fmt.Errorf("line %d: time %q is neither microseconds nor a failure", lineNo, f[2])
		}
		committed = append(committed, time.Duration(us)*time.Microsecond)
	}
	if err := sc.Err(); err != nil {
		return nil, 0, err
	}
	return committed, failed, nil
}

// lastLines is the last n lines of b, trimmed, for error messages.
func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	s := strings.Join(lines, " | ")
	if s == "" {
		return "(empty)"
	}
	return s
}
