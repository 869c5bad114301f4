package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// The README's performance table lies between these markers; `go run .
// readme` rewrites it from RESULTS.md's latest dated runs.
const (
	readmeBegin = "<!-- performance table: made by `cd bench && go run . readme` from bench/RESULTS.md; do not edit -->"
	readmeEnd   = "<!-- end of the performance table -->"
)

// contentionGoal is the goal RESULTS.md sets pgtx in the ordered contention
// cells: at least this many times the full-jitter loop's commits/s.
const contentionGoal = 1.10

// mdTable is a markdown table of RESULTS.md under a heading.
type mdTable struct {
	heading string
	when    string // "2026-12-02 03:14 UTC" or "2026-12-02": the run it belongs to
	header  []string
	rows    [][]string
}

var (
	dateRE = regexp.MustCompile(`\d{4}-\d{2}-\d{2}`)
	timeRE = regexp.MustCompile(`\b(\d{2}:\d{2}) UTC`)
)

// parseResults returns RESULTS.md's tables, each with the date (and time)
// of the run it belongs to: that of the nearest heading above it that has
// one. A heading with a time only takes the date of the heading it is
// under; a "## " heading without a date ends the dated part above it.
func parseResults(doc string) []mdTable {
	var (
		tables  []mdTable
		dates   [7]string // by heading level: the date in force
		when    string
		heading string
		cur     *mdTable
	)
	for _, line := range strings.Split(doc, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "#") {
			cur = nil
			level := len(t) - len(strings.TrimLeft(t, "#"))
			if level > 6 {
				level = 6
			}
			heading = strings.TrimSpace(t[level:])
			d := dateRE.FindString(heading)
			tm := timeRE.FindStringSubmatch(heading)
			if d == "" && tm != nil {
				for l := level - 1; l >= 1 && d == ""; l-- {
					d = dates[l]
				}
			}
			for l := level; l < len(dates); l++ {
				dates[l] = ""
			}
			switch {
			case d != "" && tm != nil:
				dates[level], when = d, d+" "+tm[1]+" UTC"
			case d != "":
				dates[level], when = d, d
			case level <= 2:
				when = ""
			}
			continue
		}
		if !strings.HasPrefix(t, "|") {
			if cur != nil && t != "" {
				cur = nil
			}
			continue
		}
		cells := splitRow(t)
		switch {
		case cur == nil:
			tables = append(tables, mdTable{heading: heading, when: when, header: cells})
			cur = &tables[len(tables)-1]
		case strings.Trim(strings.Join(cells, ""), "-: ") == "":
			// the separator row
		default:
			cur.rows = append(cur.rows, cells)
		}
	}
	return tables
}

func splitRow(line string) []string {
	cells := strings.Split(strings.Trim(line, "|"), "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// latest returns the table of the latest run whose heading starts with
// prefix; of two of the same run, the later in the file.
func latest(tables []mdTable, prefix string) (mdTable, error) {
	var best mdTable
	found := false
	for _, t := range tables {
		if t.when == "" || !strings.HasPrefix(t.heading, prefix) {
			continue
		}
		if !found || t.when >= best.when {
			best, found = t, true
		}
	}
	if !found {
		return best, fmt.Errorf("RESULTS.md has no dated table under a heading %q", prefix)
	}
	return best, nil
}

// col returns the index of the n-th (from 0) column named name.
func (t mdTable) col(name string, n int) (int, error) {
	for i, h := range t.header {
		if h == name {
			if n == 0 {
				return i, nil
			}
			n--
		}
	}
	return 0, fmt.Errorf("RESULTS.md, %q (%s): no column %q", t.heading, t.when, name)
}

// cells returns the first word of the column name of the rows whose first
// columns match keys (a key ending in "*" matches a prefix).
func (t mdTable) cells(name string, n int, keys ...string) ([]string, error) {
	c, err := t.col(name, n)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range t.rows {
		if len(r) <= c || len(r) < len(keys) {
			continue
		}
		ok := true
		for i, k := range keys {
			if p, prefix := strings.CutSuffix(k, "*"); prefix {
				ok = ok && strings.HasPrefix(r[i], p)
			} else {
				ok = ok && (k == "" || r[i] == k)
			}
		}
		if f := strings.Fields(r[c]); ok && len(f) > 0 {
			out = append(out, f[0])
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("RESULTS.md, %q (%s): no row %q", t.heading, t.when, keys)
	}
	return out, nil
}

// fmtRatio rounds "1.069×" to "1.07×".
// two returns who's cells in two columns (each by name and its n-th
// match, as cells takes them).
func (t mdTable) two(a string, na int, b string, nb int, who string) (string, string, error) {
	x, err1 := t.cells(a, na, who)
	y, err2 := t.cells(b, nb, who)
	if err := errors.Join(err1, err2); err != nil {
		return "", "", err
	}
	return x[0], y[0], nil
}

func fmtRatio(s string) string {
	f, err := strconv.ParseFloat(strings.TrimSuffix(s, "×"), 64)
	if err != nil {
		return s
	}
	return fmt.Sprintf("%.2f×", f)
}

func fmtRatios(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmtRatio(s)
	}
	return strings.Join(out, " / ")
}

func fmtTrips(s string) string { return strings.TrimSuffix(strings.TrimSuffix(s, ".00"), ".0") }

// readmeTable makes the README's performance table from RESULTS.md.
func readmeTable(results string) (string, error) {
	tables := parseResults(results)
	var rows [][3]string
	for _, f := range []func([]mdTable) ([3]string, error){overheadLine(true), overheadLine(false), sqlLine, contentionLine, cancelLine, overloadLine} {
		r, err := f(tables)
		if err != nil {
			return "", err
		}
		rows = append(rows, r)
	}
	var b strings.Builder
	b.WriteString(readmeBegin + "\n")
	b.WriteString("Measured side by side on one throwaway PostgreSQL 15 on a 2-core machine\n" +
		"(a row says when the client and the server had a core each); each\n" +
		"row is the latest dated run of its scenario in\n" +
		"[bench/RESULTS.md](bench/RESULTS.md), which has the commands, methods and\n" +
		"spreads. Each row says what its ratios are; above 1×, pgtx is the faster.\n\n")
	b.WriteString("| what (command, run) | pgtx | the alternative |\n|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r[0], r[1], r[2])
	}
	b.WriteString(readmeEnd + "\n")
	return b.String(), nil
}

func overheadLine(selectOne bool) func([]mdTable) ([3]string, error) {
	return func(tables []mdTable) ([3]string, error) {
		prefix, what := "Overhead: one-statement transaction (a one-row update", "a one-row update"
		if selectOne {
			prefix, what = "Overhead: one-statement transaction (`select 1`", "`select 1`"
		}
		t, err := latest(tables, prefix)
		if err != nil {
			return [3]string{}, err
		}
		med, err1 := t.cells("ratio (median)", 0, "pgtx")
		mean, err2 := t.cells("ratio (mean)", 0, "pgtx")
		off, err3 := t.cells("ratio (median)", 0, "pgtx, ResolveTimeout -1")
		rt, err4 := t.cells("round trips/tx", 0, "pgtx")
		base, err5 := t.cells("round trips/tx", 0, "pgx.BeginTxFunc")
		crdb, err6 := t.cells("ratio (median)", 0, "crdbpgxv5.ExecuteTx")
		workers, err7 := t.cells("workers", 0, "pgtx")
		if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
			return [3]string{}, err
		}
		return [3]string{
			fmt.Sprintf("%s transaction, %s workers: `pgx.BeginTxFunc`'s median latency over the contender's (`go run . overhead`, %s%s)", what, strings.Join(workers, " / "), t.when, pinned(t)),
			fmt.Sprintf("%s (mean %s; resolution off, `ResolveTimeout: -1`: %s), %s round trips", fmtRatios(med), fmtRatios(mean), fmtRatios(off), fmtTrips(rt[0])),
			fmt.Sprintf("`pgx.BeginTxFunc` 1×, %s round trips; cockroach-go %s", fmtTrips(base[0]), fmtRatios(crdb)),
		}, nil
	}
}

// pinned says so when t's run had the client and the server on separate
// cores, as its heading tells.
func pinned(t mdTable) string {
	if strings.Contains(t.heading, "pinned to separate cores") {
		return ", client and server on separate cores"
	}
	return ""
}

func sqlLine(tables []mdTable) ([3]string, error) {
	var parts [3][]string // pgtxsql, pgtxsqlx, pgtxgorm: "select / select and update / update"
	var when []string
	var rt string
	lo, hi := 0.0, 0.0
	for _, prefix := range []string{
		"database/sql, sqlx, GORM: one-statement transaction (`select 1`",
		"database/sql, sqlx, GORM: one-statement transaction (a one-row update",
	} {
		t, err := latest(tables, prefix)
		if err != nil {
			return [3]string{}, err
		}
		when = append(when, t.when)
		for i, lib := range []string{"database/sql", "sqlx", "GORM"} {
			r, err := t.cells("ratio module/own", 0, lib)
			if err != nil {
				return [3]string{}, err
			}
			parts[i] = append(parts[i], fmtRatios(r))
		}
		aa, err := t.cells("ratio module/own", 0, "database/sql (A/A control)")
		if err != nil {
			return [3]string{}, err
		}
		for _, s := range aa {
			f, _ := strconv.ParseFloat(strings.TrimSuffix(s, "×"), 64)
			if lo == 0 || f < lo {
				lo = f
			}
			hi = max(hi, f)
		}
		c, err := t.col("round trips/tx own → module", 0)
		if err != nil || len(t.rows) == 0 || len(t.rows[0]) <= c {
			return [3]string{}, fmt.Errorf("RESULTS.md, %q (%s): no round trips", t.heading, t.when)
		}
		rt = t.rows[0][c]
	}
	own, module, _ := strings.Cut(rt, " → ")
	run := when[0]
	if when[1] != when[0] {
		run += ", " + when[1]
	}
	return [3]string{
		fmt.Sprintf("database/sql, sqlx, GORM: `select 1` and a one-row update, 1 / 8 workers: the module's transactions/s over the library's own helper's (`go run . sql`, %s)", run),
		fmt.Sprintf("pgtxsql %s and %s; pgtxsqlx %s and %s; pgtxgorm %s and %s; %s round trips",
			parts[0][0], parts[0][1], parts[1][0], parts[1][1], parts[2][0], parts[2][1], fmtTrips(module)),
		fmt.Sprintf("`BeginTx`/`Commit`, sqlx `BeginTxx`, GORM `db.Transaction` 1×, %s round trips; A/A control %.2f–%.2f×", fmtTrips(own), lo, hi),
	}, nil
}

func contentionLine(tables []mdTable) ([3]string, error) {
	t, err := latest(tables, "Contention, rows updated in id order")
	if err != nil {
		return [3]string{}, err
	}
	workers, err1 := t.cells("workers", 0, "", "pgtx")
	commits, err2 := t.cells("commits/s", 0, "", "pgtx")
	vsJitter, err3 := t.cells("× full-jitter", 0, "", "pgtx")
	failed, err4 := t.cells("failed calls", 0, "", "pgtx")
	cut, err5 := t.cells("cut short", 0, "", "pgtx")
	fj, err6 := t.cells("commits/s", 0, "", "full-jitter loop")
	fjCut, err7 := t.cells("cut short", 0, "", "full-jitter loop")
	pb, err8 := t.cells("commits/s", 0, "", "pgbench*")
	pbFailed, err9 := t.cells("failed calls", 0, "", "pgbench*")
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7, err8, err9); err != nil {
		return [3]string{}, err
	}
	goal := "met"
	for _, r := range vsJitter {
		if f, err := strconv.ParseFloat(strings.TrimSuffix(r, "×"), 64); err != nil || f < contentionGoal {
			goal = "missed"
		}
	}
	j := func(ss []string) string { return strings.Join(ss, " / ") }
	return [3]string{
		fmt.Sprintf("SERIALIZABLE transfers on 10 hot accounts, rows in id order, %s workers: commits/s (`go run . contention`, %s)", j(workers), t.when),
		fmt.Sprintf("%s (%s the full-jitter loop's; the goal, ≥ %.2f×, %s), %s failed, %s cut short", j(commits), fmtRatios(vsJitter), contentionGoal, goal, j(failed), j(cut)),
		fmt.Sprintf("full-jitter loop %s, %s cut short; pgbench `--max-tries=11` %s with %s failed", j(fj), j(fjCut), j(pb), j(pbFailed)),
	}, nil
}

func cancelLine(tables []mdTable) ([3]string, error) {
	t, err := latest(tables, "Cancel:")
	if err != nil {
		return [3]string{}, err
	}
	get := func(who string) (string, string, error) {
		return t.two("p99 ms", 1, "reconnects per 100 cancels", 0, who)
	}
	pp, pr, err1 := get("pgtx*")
	dp, dr, err2 := get("pgx default handler")
	wp, wr, err3 := get("pgx CancelRequestContextWatcherHandler")
	if err := errors.Join(err1, err2, err3); err != nil {
		return [3]string{}, err
	}
	return [3]string{
		fmt.Sprintf("a 50ms deadline on a statement holding a row lock: deadline→lock released p99, reconnects per 100 cancels (`go run . cancel`, %s)", t.when),
		fmt.Sprintf("%sms, %s", pp, pr),
		fmt.Sprintf("pgx's default handler %sms, %s; pgx's `CancelRequestContextWatcherHandler` %sms, %s", dp, dr, wp, wr),
	}, nil
}

func overloadLine(tables []mdTable) ([3]string, error) {
	t, err := latest(tables, "Overload storm")
	if err != nil {
		return [3]string{}, err
	}
	get := func(who string) (string, string, error) {
		return t.two("of capacity", 0, "attempts per call", 0, who)
	}
	pg, pa, err1 := get("pgtx (retry budget on)*")
	ng, na, err2 := get("no retry*")
	vg, va, err3 := get("naive retry loop*")
	bg, ba, err4 := get("pgtx (budget off*")
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return [3]string{}, err
	}
	return [3]string{
		fmt.Sprintf("open-loop arrivals at 2× a shedding server's capacity: goodput (of capacity), attempts per call (`go run . overload`, %s)", t.when),
		fmt.Sprintf("%s, %s; its retry budget off: %s, %s", pg, pa, bg, ba),
		fmt.Sprintf("`pgx.BeginTxFunc` without retries %s, %s; naive retry loop %s, %s", ng, na, vg, va),
	}, nil
}

// replaceTable returns readme with the text between the markers replaced by
// table (which holds the markers).
func replaceTable(readme, table string) (string, error) {
	i := strings.Index(readme, readmeBegin)
	j := strings.Index(readme, readmeEnd)
	if i < 0 || j < i {
		return "", fmt.Errorf("README.md has no performance table between %q and %q", readmeBegin, readmeEnd)
	}
	return readme[:i] + table + readme[j+len(readmeEnd)+1:], nil
}

// writeReadme rewrites the performance table of the README at readmePath
// from the RESULTS.md at resultsPath.
func writeReadme(readmePath, resultsPath string) error {
	results, err := os.ReadFile(resultsPath)
	if err != nil {
		return err
	}
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		return err
	}
	table, err := readmeTable(string(results))
	if err != nil {
		return err
	}
	out, err := replaceTable(string(readme), table)
	if err != nil {
		return err
	}
	return os.WriteFile(readmePath, []byte(out), 0o644)
}
