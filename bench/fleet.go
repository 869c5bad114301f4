package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// The fleet's server: max_connections 50, of which 3 are reserved for
// superusers (superuser_reserved_connections), so 47 for the fleet's role,
// which is not one. The bench's own checks connect as the superuser.
const (
	fleetMaxConnections = 50
	fleetSlots          = fleetMaxConnections - 3
	fleetRole           = "bench_fleet"
	fleetRows           = 1000
	fleetDowntime       = 2 * time.Second
	fleetTopErrors      = 4
	fleetDrainTimeout   = 30 * time.Second
	fleetMaxFailures    = 5000 // failed calls a restart cell's process reports with their times
	fleetLogQuiet       = 200 * time.Millisecond
)

// fleetSpec is one fleet to run: a contender in processes of a shape, the
// workers spread over them, optionally through a restart of the server.
type fleetSpec struct {
	label     string // the cell it belongs to, as the tables name it
	contender string
	shape     fleetCell
	workers   int  // in all, spread evenly over the processes
	fit       bool // the reference sized to fit of its cell
	restart   bool
	dur       time.Duration // how long it runs: set by runAll
}

// fleetRun is what a fleetSpec measured.
type fleetRun struct {
	Cell      string       `json:"cell"`
	Contender string       `json:"contender"`
	Shape     fleetCell    `json:"shape"`
	Workers   int          `json:"workers"`
	Fit       bool         `json:"sized_to_fit,omitempty"`
	Restart   bool         `json:"restart,omitempty"`
	Dur       float64      `json:"dur_s"`
	Sum       fleetSum     `json:"sum"`
	Top       []errorCount `json:"top_errors,omitempty"`
	// Refused counts the connections the server refused for lack of slots
	// while the fleet ran (its log).
	Refused int64 `json:"refused_connections"`
	// Outage and Verdict are the restart cell's.
	Outage  *outage         `json:"outage,omitempty"`
	Verdict *restartVerdict `json:"verdict,omitempty"`
}

// refusedPerProcS is Refused per process per second of the run.
func (r fleetRun) refusedPerProcS() float64 {
	return float64(r.Refused) / float64(r.Shape.Procs) / r.Dur
}

// fleetBench is the fleet scenario's server and how to reach it.
type fleetBench struct {
	opts     options
	srv      *server.Server
	exe      string // the bench's own binary, run as each process
	adminDSN string // the superuser's
	dsn      string // the fleet role's
}

// fleet runs fleets of processes, each its own pool, against one server of
// max_connections 50: for each -fleet cell pgtx, the pgxpool loop, and pgtx
// in a fleet sized to fit (-fleet-fit) carrying the same workers; with
// -fleet-restart, both contenders in the fitting fleet through a restart.
func fleet(ctx context.Context, e *env) (result, error) {
	o := e.opts
	srv, err := server.Start(ctx, &server.Config{Settings: map[string]string{"max_connections": strconv.Itoa(fleetMaxConnections)}})
	if err != nil {
		return result{}, err
	}
	defer srv.Stop()
	if srv.LogPath() == "" {
		return result{}, fmt.Errorf("the fleet needs a local server, got %s", srv)
	}
	exe, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	f := &fleetBench{opts: o, srv: srv, exe: exe, adminDSN: srv.DSN("")}
	if f.dsn, err = withUser(f.adminDSN, fleetRole); err != nil {
		return result{}, err
	}
	if err := f.setup(ctx); err != nil {
		return result{}, err
	}
	var specs []fleetSpec
	for _, c := range o.fleet {
		w := c.Procs * o.fleetWorkers
		specs = append(specs,
			fleetSpec{label: c.String(), contender: fleetPgtx, shape: c, workers: w},
			fleetSpec{label: c.String(), contender: fleetLoop, shape: c, workers: w},
			fleetSpec{label: c.String(), contender: fleetPgtx, shape: o.fleetFit, workers: w, fit: true})
	}
	if o.fleetRestart {
		w := o.fleetFit.Procs * o.fleetWorkers
		label := o.fleetFit.String() + " restart"
		specs = append(specs,
			fleetSpec{label: label, contender: fleetPgtx, shape: o.fleetFit, workers: w, restart: true},
			fleetSpec{label: label, contender: fleetLoop, shape: o.fleetFit, workers: w, restart: true})
	}
	runs, err := f.runAll(ctx, specs)
	if err != nil {
		return result{}, err
	}
	res := result{Tables: fleetTables(o, runs), Data: runs}
	if o.fleetStrict {
		res.failed = fleetStrictCheck(runs)
	}
	return res, nil
}

// runAll runs specs. The fleets of one cell (the restart's aside) run in
// o.rounds slices of the duration each, their order rotating from one
// round to the next, and each fleet's slices add up to one run: the
// server's drift over the minutes of a cell then weighs on each alike.
func (f *fleetBench) runAll(ctx context.Context, specs []fleetSpec) ([]fleetRun, error) {
	rounds := max(f.opts.rounds, 1)
	runs := make([]fleetRun, len(specs))
	for start := 0; start < len(specs); {
		end := start + 1
		for end < len(specs) && specs[end].label == specs[start].label && !specs[start].restart {
			end++
		}
		cell := specs[start:end]
		n := rounds
		if cell[0].restart {
			n = 1
		}
		for round := range n {
			for k := range cell {
				i := start + (k+round)%len(cell)
				s := specs[i]
				s.dur = f.opts.fleetDur / time.Duration(n)
				r, err := f.run(ctx, s)
				if err != nil {
					return nil, fmt.Errorf("%s, %s in %s: %w", s.label, s.contender, s.shape, err)
				}
				runs[i] = mergeRuns(runs[i], r, round == 0)
			}
		}
		start = end
	}
	return runs, nil
}

// mergeRuns adds run r, a slice of a fleet's run, to acc; first says r
// is its first slice.
func mergeRuns(acc, r fleetRun, first bool) fleetRun {
	if first {
		return r
	}
	acc.Dur += r.Dur
	acc.Refused += r.Refused
	s := &acc.Sum
	s.Commits += r.Sum.Commits
	s.Failed += r.Sum.Failed
	for text, n := range r.Sum.Errors {
		if s.Errors == nil {
			s.Errors = map[string]int64{}
		}
		s.Errors[text] += n
	}
	s.PerSecond = append(s.PerSecond, r.Sum.PerSecond...)
	s.Commits1s = append(s.Commits1s, r.Sum.Commits1s...)
	s.Failures = append(s.Failures, r.Sum.Failures...)
	s.Unrecorded += r.Sum.Unrecorded
	// The pools' sizes and limits are the last slice's; their counts add up.
	last := r.Sum.Pool
	s.Pool.add(last)
	s.Pool.MaxConns, s.Pool.TotalConns, s.Pool.SlotLimit = last.MaxConns, last.TotalConns, last.SlotLimit
	acc.Top = topErrors(s.Errors, fleetTopErrors)
	return acc
}

// withUser is dsn with its user replaced.
func withUser(dsn, user string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	u.User = url.User(user)
	return u.String(), nil
}

// setup makes the fleet's role and its table of fleetRows rows.
func (f *fleetBench) setup(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, f.adminDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, sql := range []string{
		"create role " + fleetRole + " login",
		"create table bench_fleet (id int primary key, n bigint not null default 0)",
		fmt.Sprintf("insert into bench_fleet (id) select g from generate_series(1, %d) g", fleetRows),
		"grant select, update on bench_fleet to " + fleetRole,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return nil
}

// reset gives every fleet the same table and server to start from: the
// updates of the fleets before leave dead rows behind, which make each
// later fleet slower than the one before.
func (f *fleetBench) reset(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, f.adminDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, sql := range []string{"vacuum full analyze bench_fleet", "checkpoint"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return nil
}

// run runs one fleet: it starts the processes, restarts the server a third
// into the run if asked, collects the processes' reports, waits until
// their connections are gone, and counts the server's refusals meanwhile.
func (f *fleetBench) run(ctx context.Context, s fleetSpec) (fleetRun, error) {
	if err := f.reset(ctx); err != nil {
		return fleetRun{}, err
	}
	from, err := logSize(f.srv.LogPath())
	if err != nil {
		return fleetRun{}, err
	}
	dur := s.dur
	start := time.Now().Add(time.Second + time.Duration(s.shape.Procs)*25*time.Millisecond)
	failures := 0
	if s.restart {
		failures = fleetMaxFailures
	}
	cmds := make([]*exec.Cmd, s.shape.Procs)
	outs := make([]bytes.Buffer, s.shape.Procs)
	errs := make([]bytes.Buffer, s.shape.Procs)
	var startErr error
	for i := range cmds {
		workers := s.workers / s.shape.Procs
		if i < s.workers%s.shape.Procs {
			workers++
		}
		if workers == 0 {
			continue
		}
		cmd := exec.CommandContext(ctx, f.exe, fleetWorkerArg,
			"-contender", s.contender, "-dsn", f.dsn, "-conns", strconv.Itoa(s.shape.Conns),
			"-workers", strconv.Itoa(workers), "-rows", strconv.Itoa(fleetRows),
			"-start", strconv.FormatInt(start.UnixNano(), 10), "-dur", dur.String(),
			"-failures", strconv.Itoa(failures))
		cmd.Stdout, cmd.Stderr = &outs[i], &errs[i]
		if startErr = cmd.Start(); startErr != nil {
			break
		}
		cmds[i] = cmd
	}
	var out *outage
	var restartErr error
	if s.restart && startErr == nil {
		out, restartErr = f.restartAt(ctx, start.Add(dur/3))
	}
	var reports []fleetReport
	var waitErrs []error
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		if err := cmd.Wait(); err != nil {
			waitErrs = append(waitErrs, fmt.Errorf("process %d: %w: %s", i, err, tail(errs[i].String(), 500)))
			continue
		}
		var r fleetReport
		if err := json.Unmarshal(outs[i].Bytes(), &r); err != nil {
			waitErrs = append(waitErrs, fmt.Errorf("process %d: its report: %w", i, err))
			continue
		}
		reports = append(reports, r)
	}
	if err := errors.Join(startErr, restartErr, errors.Join(waitErrs...)); err != nil {
		return fleetRun{}, err
	}
	if err := f.waitDrained(ctx); err != nil {
		return fleetRun{}, err
	}
	if err := waitLogQuiet(ctx, f.srv.LogPath()); err != nil {
		return fleetRun{}, err
	}
	refused, _, err := countRefusals(f.srv.LogPath(), from)
	if err != nil {
		return fleetRun{}, err
	}
	r := fleetRun{Cell: s.label, Contender: s.contender, Shape: s.shape, Workers: s.workers, Fit: s.fit, Restart: s.restart,
		Dur: dur.Seconds(), Sum: sumReports(reports), Refused: refused, Outage: out}
	r.Top = topErrors(r.Sum.Errors, fleetTopErrors)
	if out != nil {
		v := judgeRestart(r.Sum.Failures, fleetCallTimeout, *out)
		r.Verdict = &v
	}
	return r, nil
}

// restartAt restarts the server at t with fleetDowntime of downtime, and
// tells when it went down and when it was back.
func (f *fleetBench) restartAt(ctx context.Context, t time.Time) (*outage, error) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
	}
	down := time.Now()
	if err := f.srv.Restart(ctx, fleetDowntime); err != nil {
		return nil, err
	}
	return &outage{Down: down, Up: time.Now()}, nil
}

// waitDrained waits until the server has no session of the fleet's role
// left, so that the next fleet starts on an empty server.
func (f *fleetBench) waitDrained(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, fleetDrainTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.adminDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for {
		var n int
		err := conn.QueryRow(ctx, "select count(*) from pg_stat_activity where usename = $1", fleetRole).Scan(&n)
		if err != nil {
			return fmt.Errorf("waiting for the fleet's sessions to end: %w", err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d sessions of the fleet left after %v", n, fleetDrainTimeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitLogQuiet waits until the server's log has not grown for
// fleetLogQuiet, at most fleetDrainTimeout: a backend that refused one of
// the fleet's last connects may still be writing its line when the
// fleet's sessions are gone, and that line is this fleet's, not the next.
func waitLogQuiet(ctx context.Context, path string) error {
	deadline := time.Now().Add(fleetDrainTimeout)
	last, err := logSize(path)
	if err != nil {
		return err
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(fleetLogQuiet):
		}
		n, err := logSize(path)
		if err != nil {
			return err
		}
		if n == last {
			return nil
		}
		last = n
	}
	return nil
}

// logSize is the current length of the server's log.
func logSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// fleetStrictCheck is -fleet-strict's verdict: pgtx fails no call, except
// in the restart cell calls whose deadline ended before the server was back.
func fleetStrictCheck(runs []fleetRun) error {
	var errs []error
	for _, r := range runs {
		if r.Contender != fleetPgtx {
			continue
		}
		where := fmt.Sprintf("fleet %s (%s, %d workers)", r.Cell, r.Shape, r.Workers)
		switch {
		case !r.Restart && r.Sum.Failed > 0:
			errs = append(errs, fmt.Errorf("%s: pgtx failed %d calls (%s)", where, r.Sum.Failed, failedSeconds(r.Sum.PerSecond)))
		case r.Restart && r.Verdict != nil && r.Verdict.NotExcused+r.Sum.Unrecorded > 0:
			errs = append(errs, fmt.Errorf("%s: pgtx failed %d calls whose deadline ended after the server was back (%d unrecorded)",
				where, r.Verdict.NotExcused, r.Sum.Unrecorded))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("-fleet-strict: %w", errors.Join(errs...))
	}
	return nil
}

// failedSeconds says in which seconds of the run calls failed, and how
// many: "second 1: 2, second 5: 1".
func failedSeconds(perSecond []int64) string {
	var b strings.Builder
	for i, n := range perSecond {
		if n == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "second %d: %d", i+1, n)
	}
	return b.String()
}

// fleetTables are the scenario's tables: the fleets, their failed calls by
// error, and the restart cell.
func fleetTables(o options, runs []fleetRun) []table {
	main := table{
		Title: fmt.Sprintf("Fleet: processes each with its own pool, one server of max_connections %d (%d slots for the fleet's role)",
			fleetMaxConnections, fleetSlots),
		Note: fmt.Sprintf("Each process runs %d closed-loop workers of one-row updates (%d rows), each call with a %v deadline, for %v; "+
			"the contenders ran in %d rounds of a %v slice each, their order rotating, each from a vacuumed table. pgxpool loop: up to %d tries, %v apart, on 40001, 40P01, 53300 or a connect error. "+
			"Sized to fit: pgtx in %s processes carrying the same workers. Refused connections: the server log's "+
			"\"too many clients\" and \"remaining connection slots are reserved\" lines during the run.",
			o.fleetWorkers, fleetRows, fleetCallTimeout, o.fleetDur, max(o.rounds, 1), o.fleetDur/time.Duration(max(o.rounds, 1)),
			fleetLoopTries, fleetLoopPause, o.fleetFit),
		Header: []string{"fleet", "contender", "commits", "× pgxpool loop", "× sized to fit", "failed calls",
			"failed per second (min–max)", "refused connections", "refused per process per second"},
	}
	byCell := map[string][]fleetRun{}
	var cells []string
	for _, r := range runs {
		if r.Restart {
			continue
		}
		if _, ok := byCell[r.Cell]; !ok {
			cells = append(cells, r.Cell)
		}
		byCell[r.Cell] = append(byCell[r.Cell], r)
	}
	for _, cell := range cells {
		rs := byCell[cell]
		var loop, fit float64
		for _, r := range rs {
			switch {
			case r.Fit:
				fit = float64(r.Sum.Commits)
			case r.Contender == fleetLoop:
				loop = float64(r.Sum.Commits)
			}
		}
		for _, r := range rs {
			name := r.Contender
			if r.Fit {
				name = fmt.Sprintf("pgtx, sized to fit (%s, %d workers)", r.Shape, r.Workers)
			}
			lo, hi := r.Sum.perSecondRange()
			main.Rows = append(main.Rows, []string{
				fmt.Sprintf("%s (%d workers)", cell, r.Workers), name, num(float64(r.Sum.Commits)),
				timesOf(float64(r.Sum.Commits), loop), timesOf(float64(r.Sum.Commits), fit), num(float64(r.Sum.Failed)),
				fmt.Sprintf("%d–%d", lo, hi), num(float64(r.Refused)), fmtf(r.refusedPerProcS(), 2)})
		}
	}
	tables := []table{main}
	if t, ok := restartTable(runs); ok {
		tables = append(tables, t)
	}
	return append(tables, errorsTable(runs))
}

// timesOf is a/b as "0.95×", or "–" when b is 0.
func timesOf(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return x(a / b)
}

// restartTable is the restart cell's table, if it ran.
func restartTable(runs []fleetRun) (table, bool) {
	t := table{
		Header: []string{"fleet", "contender", "commits", "failed calls", "deadline ended before the server was back",
			"deadline ended after it was back", "started while down", "ended while down", "refused connections"},
	}
	for _, r := range runs {
		if !r.Restart || r.Verdict == nil || r.Outage == nil {
			continue
		}
		v := r.Verdict
		if t.Title == "" {
			t.Title = fmt.Sprintf("Fleet through a restart: %s, the server down for %v a third into the run", r.Shape, fleetDowntime)
			t.Note = "A failed call is excused when it ended after the server went down and its deadline came before the server " +
				"accepted connections again; every other failure counts against the contender. Down and back are the times " +
				"the bench sent the shutdown and the restart returned."
		}
		t.Rows = append(t.Rows, []string{fmt.Sprintf("%s (%d workers)", r.Shape, r.Workers), r.Contender,
			num(float64(r.Sum.Commits)), num(float64(r.Sum.Failed)), num(float64(v.Excused)), num(float64(v.NotExcused)),
			num(float64(v.StartedDown)), num(float64(v.EndedDown)), num(float64(r.Refused))})
	}
	return t, len(t.Rows) > 0
}

// errorsTable lists each fleet's most frequent failures by error text.
func errorsTable(runs []fleetRun) table {
	t := table{
		Title:  "Fleet: failed calls by error",
		Header: []string{"fleet", "contender", "failed calls", "error"},
	}
	for _, r := range runs {
		name := r.Contender
		if r.Fit {
			name += ", sized to fit"
		}
		for _, e := range r.Top {
			t.Rows = append(t.Rows, []string{r.Cell, name, num(float64(e.Count)), "`" + cellText(e.Text) + "`"})
		}
	}
	if len(t.Rows) == 0 {
		t.Note = "No call failed."
	} else {
		t.Note = fmt.Sprintf("The %d most frequent error texts of each fleet.", fleetTopErrors)
	}
	return t
}

// cellText is an error text made safe for a code span in a markdown
// table's cell.
func cellText(s string) string {
	return strings.NewReplacer("`", "'", "|", `\|`).Replace(s)
}
