package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// table is one markdown table of a scenario.
type table struct {
	Title  string     `json:"title"`
	Note   string     `json:"note,omitempty"`
	Header []string   `json:"header"`
	Rows   [][]string `json:"rows"`
}

// markdown writes t as a markdown table with its title and note.
func (t table) markdown(w io.Writer) {
	fmt.Fprintf(w, "### %s\n\n", t.Title)
	if t.Note != "" {
		fmt.Fprintf(w, "%s\n\n", t.Note)
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(t.Header, " | "))
	seps := make([]string, len(t.Header))
	for i := range seps {
		seps[i] = "---"
		if i > 0 {
			seps[i] = "--:"
		}
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
	for _, r := range t.Rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
	fmt.Fprintln(w)
}

// result is what a scenario produced: its tables for people and its data
// for the JSON file.
type result struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"wall_ns"`
	Tables   []table       `json:"tables"`
	Data     any           `json:"data"`
	// failed is the scenario's verdict on what it measured (the fleet's
	// -fleet-strict), returned after the reports are written.
	failed error
}

// machine describes where the benchmark ran.
type machine struct {
	Date     string `json:"date"`
	Command  string `json:"command"`
	CPUs     int    `json:"nproc"`
	CPUModel string `json:"cpu_model"`
	RAM      string `json:"ram"`
	Go       string `json:"go"`
	Postgres string `json:"postgres"`
	Server   string `json:"server"`
}

// describeMachine gathers the machine description; the Postgres version is
// asked of the server.
func describeMachine(ctx context.Context, admin *pgxpool.Pool, server string) machine {
	m := machine{
		Date:     time.Now().UTC().Format("2006-01-02 15:04 MST"),
		Command:  "cd bench && go run . " + strings.Join(os.Args[1:], " "),
		CPUs:     runtime.NumCPU(),
		CPUModel: procField("/proc/cpuinfo", "model name"),
		Go:       runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		Server:   server,
	}
	m.Command = strings.TrimSpace(m.Command)
	if kb, err := strconv.ParseInt(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal"), " kB"), 10, 64); err == nil {
		m.RAM = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
	}
	if err := admin.QueryRow(ctx, "select version()").Scan(&m.Postgres); err != nil {
		m.Postgres = "unknown: " + err.Error()
	}
	return m
}

// procField returns the value of the first "name: value" line of a /proc
// file, or "unknown".
func procField(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// writeMarkdown writes the whole report: the machine, then each scenario's
// tables.
func writeMarkdown(w io.Writer, m machine, results []result) {
	fmt.Fprintf(w, "## Run of %s\n\n", m.Date)
	fmt.Fprintf(w, "- command: `%s`\n", m.Command)
	fmt.Fprintf(w, "- machine: %d CPUs (nproc), %s, %s RAM\n", m.CPUs, m.CPUModel, m.RAM)
	fmt.Fprintf(w, "- Go: %s\n", m.Go)
	fmt.Fprintf(w, "- PostgreSQL: %s (%s)\n\n", m.Postgres, m.Server)
	for _, r := range results {
		fmt.Fprintf(w, "<!-- scenario %s: %.1fs wall -->\n\n", r.Name, r.Duration.Seconds())
		for _, t := range r.Tables {
			t.markdown(w)
		}
	}
}

// writeJSON writes the machine and every scenario's data to path.
func writeJSON(path string, m machine, results []result) error {
	b, err := json.MarshalIndent(struct {
		Machine   machine  `json:"machine"`
		Scenarios []result `json:"scenarios"`
	}{m, results}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ms formats a duration in milliseconds for the tables.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// num formats a rate or count with thousands separators.
func num(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// x formats a ratio as "1.23×".
func x(v float64) string { return fmt.Sprintf("%.2f×", v) }

// pct formats a fraction as a percentage.
func pct(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) }

// msf is a duration in (fractional) milliseconds, for the JSON.
func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fmtf formats v with prec decimals.
func fmtf(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }

// itoa formats an int.
func itoa(v int) string { return strconv.Itoa(v) }

// itoa64 formats an int64.
func itoa64(v int64) string { return strconv.FormatInt(v, 10) }
