// Command bench measures pgtx side by side with the alternatives users choose
// between — pgx.BeginTxFunc without retry, a hand-written whole-transaction
// retry loop (immediate, and with full-jitter backoff), and cockroach-go's
// crdbpgxv5.ExecuteTx — in one run on one server.
//
// It uses DATABASE_URL when set, otherwise it starts a throwaway PostgreSQL
// (pgtxtest) and removes it at the end:
//
//	cd bench && go run .                               # every scenario, default durations
//	cd bench && go run . -dur 200ms -rounds 1 -workers 8 overhead contention sql   # the short CI run
//	cd bench && go run . -dur 10s contention           # longer cells
//	cd bench && go run . -latency 0,250us,500us overhead  # its cells on loopback and through the kit's fault proxy
//	cd bench && go run . -latency 0,250us,500us roundtrips  # deferred statements and batches against pgx.BeginTxFunc
//	cd bench && go run . readme                        # README.md's performance table from RESULTS.md
//	cd bench && go run . -fleet 16x4 -fleet-dur 5s -json "" fleet   # the fleet's short CI run
//
// Scenarios: overhead, connect, contention, cancel, overload, timeout, sql
// (all by default), and three that run only when named: backoff, a side
// experiment on pgtx's conflict backoff; roundtrips, transactions of one to
// four statements at each -latency, pgx.BeginTxFunc against pgtx's
// statements, its deferred ones (package deferred) and whole batches; and
// fleet. The fleet scenario runs
// processes of the bench's own binary, each with its own pool (-fleet
// 16x4,64x2: processes x MaxConns), against one local server of
// max_connections 50 that it starts itself (DATABASE_URL is not used there):
// pgtx, then the usual retry loop over pgxpool, then pgtx in a fleet sized
// to fit (-fleet-fit) carrying the same workers; -fleet-restart adds both
// contenders in that fitting fleet through a 2s restart, and -fleet-strict
// makes pgtx's failed calls fail the run. Within a scenario the contenders run alternately, in
// rounds, so that machine noise hits all of them alike. The contention
// scenario runs SERIALIZABLE transfers on 10 hot accounts at 8, 32 and 128
// workers (-workers), each followed by PostgreSQL's pgbench on the same
// workload as an outside anchor, and a low-contention cell, 1,000 accounts
// at 8 workers; pgtx runs there with its contention manager and without
// it. The tables go to standard output as markdown (and to -md), the data
// to -json, and the contention chart to -svg. The sql scenario sets
// pgtx's modules for database/sql, sqlx and GORM beside each library's own
// transaction helper, as the overhead scenario does, and pgtxsql beside a
// full-jitter loop over database/sql on the hot accounts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// options are the command-line settings every scenario sees.
type options struct {
	dur          time.Duration // measured time per cell (contender × setting)
	rounds       int           // slices each cell is cut into, interleaved
	cancels      int           // cancel scenario: cancels per contender
	admit        int           // overload scenario: statements the server admits at once
	conflictBase time.Duration // pgtx's ConflictBaseBackoff in contention (0: default)
	conflictMax  time.Duration // pgtx's ConflictMaxBackoff in contention (0: default)
	deadlock     time.Duration // deadlock_timeout for the transfer scenarios (0: the server's)
	workers      []int         // contention scenario: worker counts of the hot cells, ascending
	sweep        []backoffSetting
	fleet        []fleetCell     // fleet scenario: processes x MaxConns of each cell
	fleetFit     fleetCell       // fleet scenario: the reference sized to fit, and the restart cell
	fleetDur     time.Duration   // fleet scenario: each fleet's run
	fleetWorkers int             // fleet scenario: workers per process
	fleetRestart bool            // fleet scenario: also run the fitting fleet through a restart
	fleetStrict  bool            // fleet scenario: fail on pgtx's failed calls
	latencies    []time.Duration // one-way latencies the scenarios' cells run at (0: loopback), but fleet's and backoff's
	jsonPath     string
	mdPath       string
	svgPath      string
	cpuProfile   string
	replot       string
}

// env is what a scenario runs against.
type env struct {
	opts  options
	dsn   string
	admin *pgxpool.Pool // setup and checks, never measured
}

// scenario is one benchmark of the program.
type scenario struct {
	name    string
	what    string
	byDflt  bool
	measure func(ctx context.Context, e *env) (result, error)
	// atEachLatency: the program runs the whole scenario once per
	// -latency, through the kit's fault proxy (those that do not set it
	// run their cells at each latency themselves, or start servers of
	// their own).
	atEachLatency bool
}

// scenarios lists the benchmarks in the order they run.
var scenarios = []scenario{
	{"overhead", "one-statement transaction, 1 and 8 workers: latency and CPU against pgx.BeginTxFunc, interleaved", true, overhead, false},
	{"roundtrips", "transactions of 1 to 4 statements at each -latency, 1 worker: pgx.BeginTxFunc against pgtx, its deferred statements and whole batches, interleaved", false, roundtripsScenario, false},
	{"connect", "a reconnect in a warm pool (Reset, then one statement) and a new pool with its first statement: pgtx against pgxpool, alternated", true, connect, true},
	{"contention", "SERIALIZABLE transfers on 10 hot accounts at -workers (8, 32, 128), ordered and random updates, pgbench as an outside anchor; and 1,000 accounts at 8 workers", true, contention, true},
	{"cancel", "a deadline ends a statement holding a row lock: time to return, to release, reconnects", true, cancelBench, true},
	{"overload", "open-loop arrivals at 2x capacity against a server-side admission limit (53300)", true, overload, true},
	{"timeout", "slow and fast classes: one shared pool vs per-class pools (bulkheads)", true, timeoutStorm, true},
	{"sql", "database/sql, sqlx, GORM: each library's own transaction helper against pgtx's module, `select 1` and a one-row update at 1 and 8 workers, interleaved; and hot-row transfers through pgtxsql against a full-jitter loop over database/sql at 8 and 32 workers", true, sqlScenario, true},
	{"backoff", "side experiment: pgtx's conflict backoff settings (-sweep) against the full-jitter loop", false, backoffSweep, false},
	{"fleet", "processes of the bench's own binary, each its own pool (-fleet), against one server of max_connections 50: pgtx against the pgxpool loop and a fleet sized to fit", false, fleet, false},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the program; it returns the exit status: 0, 1 on a failure, 2 on
// bad usage (a bad flag, value or scenario name).
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == fleetWorkerArg {
		return fleetWorker(args[1:], stdout, stderr)
	}
	if len(args) == 1 && args[0] == "readme" {
		if err := writeReadme("../README.md", "RESULTS.md"); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		return 0
	}
	opts, names, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	if opts.replot != "" {
		if err := replot(opts.replot, opts.svgPath); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if opts.cpuProfile != "" {
		f, err := os.Create(opts.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	baseline := runtime.NumGoroutine()
	if err := runScenarios(ctx, opts, names, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	if err := checkGoroutines(baseline, stderr); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	return 0
}

// checkGoroutines waits a little for the goroutines the run started to end,
// and fails with their stacks when some did not: every goroutine the
// benchmark starts must be joined, and every pool closed.
func checkGoroutines(baseline int, stderr io.Writer) error {
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			_ = pprof.Lookup("goroutine").WriteTo(stderr, 1)
			return fmt.Errorf("goroutines leaked: %d running, %d at the start", runtime.NumGoroutine(), baseline)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// parseArgs parses the flags and the scenario names; with no names, every
// default scenario runs.
func parseArgs(args []string, stderr io.Writer) (options, []string, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.dur, "dur", 2*time.Second, "measured time per cell (contender × setting); at the default, contention takes about two minutes, every other scenario under one")
	fs.IntVar(&o.rounds, "rounds", 4, "slices each cell is cut into; the contenders alternate slice by slice")
	fs.IntVar(&o.cancels, "cancels", 0, "cancel scenario: cancels per contender (0: 20 per second of -dur)")
	fs.IntVar(&o.admit, "admit", 4, "overload scenario: statements the server admits at once")
	fs.DurationVar(&o.conflictBase, "conflict-base", 0, "pgtx RetryConfig.ConflictBaseBackoff for contention (0: the library default)")
	fs.DurationVar(&o.conflictMax, "conflict-max", 0, "pgtx RetryConfig.ConflictMaxBackoff for contention (0: the library default)")
	fs.DurationVar(&o.deadlock, "deadlock-timeout", 100*time.Millisecond, "deadlock_timeout of the database during contention and backoff (0: leave the server's, usually 1s)")
	workers := fs.String("workers", "8,32,128", "contention scenario: worker counts of the hot cells, comma-separated (pgx.BeginTxFunc, crdbpgxv5.ExecuteTx and pgtx without resolution run up to 32 only)")
	sweep := fs.String("sweep", "2ms/100ms,2ms/500ms,5ms/500ms,10ms/1s", "backoff scenario: pgtx conflict backoffs to try, base/max,... (at most 4)")
	fleetCells := fs.String("fleet", "16x4,64x2", "fleet scenario: fleets of processes x MaxConns to run, comma-separated")
	fleetFit := fs.String("fleet-fit", "8x4", fmt.Sprintf("fleet scenario: processes x MaxConns of the fleet sized to fit (at most %d connections), the reference and the restart cell", fleetSlots))
	fs.DurationVar(&o.fleetDur, "fleet-dur", 30*time.Second, "fleet scenario: how long each fleet runs")
	fs.IntVar(&o.fleetWorkers, "fleet-workers", 4, "fleet scenario: closed-loop workers per process")
	fs.BoolVar(&o.fleetRestart, "fleet-restart", false, fmt.Sprintf("fleet scenario: also run both contenders in the -fleet-fit fleet through a %v restart a third into the run", fleetDowntime))
	fs.BoolVar(&o.fleetStrict, "fleet-strict", false, "fleet scenario: exit 1 when pgtx failed a call, except in the restart cell calls whose deadline ended before the server was back")
	fs.StringVar(&o.jsonPath, "json", "results.json", "write the results as JSON here (empty: don't)")
	latency := fs.String("latency", "0", "one-way latencies to run every scenario's cells at but the fleet's and backoff's, comma-separated (0: loopback; others through the kit's fault proxy), e.g. 0,250us,500us")
	fs.StringVar(&o.mdPath, "md", "", "also write the markdown report here")
	fs.StringVar(&o.svgPath, "svg", "contention.svg", "write the contention chart here when contention runs (empty: don't)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the run here")
	fs.StringVar(&o.replot, "replot", "", "only redraw -svg from the contention data of this JSON results file, and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run . [flags] [scenario...]\n\nscenarios:\n")
		for _, s := range scenarios {
			dflt := ""
			if !s.byDflt {
				dflt = " (only when named)"
			}
			fmt.Fprintf(stderr, "  %-11s %s%s\n", s.name, s.what, dflt)
		}
		fmt.Fprintf(stderr, "\nreadme: rewrite README.md's performance table from the latest dated runs of RESULTS.md (go run . readme)\n")
		fmt.Fprintf(stderr, "\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, nil, err
	}
	switch {
	case o.dur <= 0:
		return o, nil, fmt.Errorf("-dur must be positive, got %v", o.dur)
	case o.rounds < 1:
		return o, nil, fmt.Errorf("-rounds must be at least 1, got %d", o.rounds)
	case o.cancels < 0:
		return o, nil, fmt.Errorf("-cancels must not be negative, got %d", o.cancels)
	case o.admit < 1:
		return o, nil, fmt.Errorf("-admit must be at least 1, got %d", o.admit)
	case o.deadlock < 0:
		return o, nil, fmt.Errorf("-deadlock-timeout must not be negative, got %v", o.deadlock)
	case o.conflictBase < 0 || o.conflictMax < 0:
		return o, nil, errors.New("-conflict-base and -conflict-max must not be negative")
	case o.fleetDur <= 0:
		return o, nil, fmt.Errorf("-fleet-dur must be positive, got %v", o.fleetDur)
	case o.fleetWorkers < 1:
		return o, nil, fmt.Errorf("-fleet-workers must be at least 1, got %d", o.fleetWorkers)
	}
	var err error
	if o.workers, err = parseWorkers(*workers); err != nil {
		return o, nil, fmt.Errorf("-workers: %w", err)
	}
	if o.sweep, err = parseSweep(*sweep); err != nil {
		return o, nil, fmt.Errorf("-sweep: %w", err)
	}
	if o.latencies, err = parseLatencies(*latency); err != nil {
		return o, nil, err
	}
	if o.fleet, err = parseFleet(*fleetCells); err != nil {
		return o, nil, fmt.Errorf("-fleet: %w", err)
	}
	if o.fleetFit, err = parseFleetCell(*fleetFit); err != nil {
		return o, nil, fmt.Errorf("-fleet-fit: %w", err)
	}
	if n := o.fleetFit.Procs * o.fleetFit.Conns; n > fleetSlots {
		return o, nil, fmt.Errorf("-fleet-fit: %s wants %d connections, more than the %d slots it must fit in", o.fleetFit, n, fleetSlots)
	}
	if o.cancels == 0 {
		o.cancels = max(5, int(20*o.dur.Seconds()))
	}
	names := fs.Args()
	for i, n := range names {
		names[i] = strings.ToLower(n)
		if !slices.ContainsFunc(scenarios, func(s scenario) bool { return s.name == names[i] }) {
			fs.Usage()
			return o, nil, fmt.Errorf("unknown scenario %q", n)
		}
	}
	return o, names, nil
}

// runScenarios starts or finds the server, runs the chosen scenarios in the
// order of the scenarios list, and writes the reports.
func runScenarios(ctx context.Context, opts options, names []string, stdout, stderr io.Writer) error {
	dsn, cleanup, err := server.DatabaseURL(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer admin.Close()
	e := &env{opts: opts, dsn: dsn, admin: admin}
	m := describeMachine(ctx, admin, redacted(dsn))
	fmt.Fprintf(stderr, "bench: %s on %s; %v per cell in %d rounds\n", m.Postgres, m.Server, opts.dur, opts.rounds)

	var results []result
	var failed []error // the scenarios' verdicts, returned after the reports
	for _, s := range scenarios {
		if len(names) == 0 && !s.byDflt || len(names) > 0 && !slices.Contains(names, s.name) {
			continue
		}
		fmt.Fprintf(stderr, "bench: %s: %s\n", s.name, s.what)
		latencies := []time.Duration{0}
		if s.atEachLatency {
			latencies = opts.latencies
		}
		var r result
		for _, d := range latencies {
			start := time.Now()
			at, closeProxy, err := atLatency(e, d)
			if err != nil {
				return fmt.Errorf("%s at %v: %w", s.name, d, err)
			}
			r, err = s.measure(ctx, at)
			closeProxy()
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			r.Name, r.Duration = s.name, time.Since(start)
			if d != 0 {
				r.Name += " at " + d.String()
				for i := range r.Tables {
					r.Tables[i].Title += ", at " + latencyName(d)
				}
			}
			fmt.Fprintf(stderr, "bench: %s done in %.1fs\n", r.Name, r.Duration.Seconds())
			results = append(results, r)
			failed = append(failed, r.failed)
		}
		if s.name == "contention" && opts.svgPath != "" {
			if err := os.WriteFile(opts.svgPath, contentionChart(r.Data.([]contentionRow)), 0o644); err != nil {
				return err
			}
		}
	}
	writeMarkdown(stdout, m, results)
	if opts.mdPath != "" {
		f, err := os.Create(opts.mdPath)
		if err != nil {
			return err
		}
		writeMarkdown(f, m, results)
		if err := f.Close(); err != nil {
			return err
		}
	}
	if opts.jsonPath != "" {
		if err := writeJSON(opts.jsonPath, m, results); err != nil {
			return err
		}
	}
	return errors.Join(failed...)
}

// redacted names the server without its credentials.
func redacted(dsn string) string {
	if cfg, err := pgx.ParseConfig(dsn); err == nil {
		return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	}
	return "the database"
}

// parseWorkers parses "8,32,128": distinct positive worker counts, returned
// in ascending order.
func parseWorkers(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", part)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("%d is given twice", n)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no worker count; want e.g. 8,32,128")
	}
	slices.Sort(out)
	return out, nil
}
