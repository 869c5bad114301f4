package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// fleetCell is one shape of fleet: Procs processes, each with a pool of
// Conns connections.
type fleetCell struct {
	Procs int `json:"processes"`
	Conns int `json:"max_conns"`
}

// String is "16x4", as the -fleet flag takes it.
func (c fleetCell) String() string { return strconv.Itoa(c.Procs) + "x" + strconv.Itoa(c.Conns) }

// Bounds of a fleet cell: enough for any trial on one machine, few enough
// that a typing error does not start thousands of processes.
const (
	fleetMaxProcs = 256
	fleetMaxConns = 100
)

// parseFleet parses "16x4,64x2": distinct cells of processes x MaxConns,
// in the order given.
func parseFleet(s string) ([]fleetCell, error) {
	var out []fleetCell
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		c, err := parseFleetCell(part)
		if err != nil {
			return nil, err
		}
		if slices.Contains(out, c) {
			return nil, fmt.Errorf("%s is given twice", c)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no cell; want processes x MaxConns, e.g. 16x4,64x2")
	}
	return out, nil
}

// parseFleetCell parses one cell, "16x4".
func parseFleetCell(s string) (fleetCell, error) {
	a, b, ok := strings.Cut(strings.ToLower(strings.TrimSpace(s)), "x")
	if !ok {
		return fleetCell{}, fmt.Errorf("%q: want processes x MaxConns, e.g. 16x4", s)
	}
	procs, err1 := strconv.Atoi(strings.TrimSpace(a))
	conns, err2 := strconv.Atoi(strings.TrimSpace(b))
	switch {
	case err1 != nil || err2 != nil:
		return fleetCell{}, fmt.Errorf("%q: want processes x MaxConns as two integers, e.g. 16x4", s)
	case procs < 1 || procs > fleetMaxProcs:
		return fleetCell{}, fmt.Errorf("%q: processes must be 1 to %d", s, fleetMaxProcs)
	case conns < 1 || conns > fleetMaxConns:
		return fleetCell{}, fmt.Errorf("%q: MaxConns must be 1 to %d", s, fleetMaxConns)
	}
	return fleetCell{Procs: procs, Conns: conns}, nil
}

// fleetReport is what one worker process prints, as one JSON line, when
// its run ends.
type fleetReport struct {
	Contender string `json:"contender"`
	Commits   int64  `json:"commits"`
	Failed    int64  `json:"failed"`
	// Errors counts the failed calls by error text; texts beyond
	// fleetMaxTexts distinct ones are counted under fleetOtherText.
	Errors map[string]int64 `json:"errors,omitempty"`
	// PerSecond counts the failed calls by the second of the run they
	// ended in (calls that ended after the run, in its last second).
	PerSecond []int64 `json:"failed_per_second"`
	// CommitsPerSecond counts the commits by the second of the run.
	CommitsPerSecond []int64 `json:"commits_per_second,omitempty"`
	// Failures are the failed calls with their times, up to the number
	// asked for (the restart cell); Unrecorded counts those left out.
	Failures   []fleetFailure `json:"failures,omitempty"`
	Unrecorded int64          `json:"unrecorded_failures,omitempty"`
	Pool       fleetPoolStats `json:"pool"`
}

// fleetFailure is one failed call: when it started and ended (Unix
// nanoseconds), and its error text.
type fleetFailure struct {
	Start int64  `json:"start_unix_ns"`
	End   int64  `json:"end_unix_ns"`
	Err   string `json:"err"`
}

// fleetPoolStats are a process's pool statistics at the end of its run:
// pgxpool's for both contenders, and pgtx's own for pgtx.
type fleetPoolStats struct {
	MaxConns         int64 `json:"max_conns"`
	TotalConns       int64 `json:"total_conns"`
	AcquireCount     int64 `json:"acquire_count"`
	EmptyAcquire     int64 `json:"empty_acquire_count"`
	CanceledAcquire  int64 `json:"canceled_acquire_count"`
	NewConns         int64 `json:"new_conns_count"`
	Transactions     int64 `json:"pgtx_transaction_count,omitempty"`
	AcquireTimeouts  int64 `json:"pgtx_acquire_timeout_count,omitempty"`
	QueueFull        int64 `json:"pgtx_queue_full_count,omitempty"`
	AcquireWaitCount int64 `json:"pgtx_acquire_wait_count,omitempty"`
	// pgtx's Stats.Slots, summed over the processes: refused connects,
	// limits, probes, and the waits for a held connection.
	SlotRefused   int64 `json:"pgtx_slot_refused_count,omitempty"`
	SlotLimit     int64 `json:"pgtx_slot_limit,omitempty"`
	SlotProbes    int64 `json:"pgtx_slot_probe_count,omitempty"`
	SlotWaits     int64 `json:"pgtx_slot_wait_count,omitempty"`
	SlotWaitNanos int64 `json:"pgtx_slot_wait_ns,omitempty"`
}

// add adds o's counts to s.
func (s *fleetPoolStats) add(o fleetPoolStats) {
	s.MaxConns += o.MaxConns
	s.TotalConns += o.TotalConns
	s.AcquireCount += o.AcquireCount
	s.EmptyAcquire += o.EmptyAcquire
	s.CanceledAcquire += o.CanceledAcquire
	s.NewConns += o.NewConns
	s.Transactions += o.Transactions
	s.AcquireTimeouts += o.AcquireTimeouts
	s.QueueFull += o.QueueFull
	s.AcquireWaitCount += o.AcquireWaitCount
	s.SlotRefused += o.SlotRefused
	s.SlotLimit += o.SlotLimit
	s.SlotProbes += o.SlotProbes
	s.SlotWaits += o.SlotWaits
	s.SlotWaitNanos += o.SlotWaitNanos
}

// Bounds of the error texts a worker keeps.
const (
	fleetMaxTexts  = 32
	fleetTextLen   = 300
	fleetOtherText = "(other errors)"
)

// durationText matches the durations error messages carry ("gave up
// after 8 attempts in 1.79s"), which would split one cause into many texts.
var durationText = regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|ms|s)\b`)

// errorText is the text under which err is counted: its message with its
// durations left out, cut to fleetTextLen bytes.
func errorText(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	s = durationText.ReplaceAllString(s, "…")
	if len(s) > fleetTextLen {
		s = s[:fleetTextLen] + "…"
	}
	return s
}

// countErrors counts n failed calls of text in m, keeping at most
// fleetMaxTexts distinct texts besides fleetOtherText.
func countErrors(m map[string]int64, text string, n int64) {
	if _, ok := m[text]; !ok && len(m) >= fleetMaxTexts {
		text = fleetOtherText
	}
	m[text] += n
}

// fleetSum is the sum of a fleet's worker reports.
type fleetSum struct {
	Processes  int              `json:"processes"`
	Commits    int64            `json:"commits"`
	Failed     int64            `json:"failed"`
	Errors     map[string]int64 `json:"errors,omitempty"`
	PerSecond  []int64          `json:"failed_per_second"`
	Commits1s  []int64          `json:"commits_per_second,omitempty"`
	Failures   []fleetFailure   `json:"-"`
	Unrecorded int64            `json:"unrecorded_failures,omitempty"`
	Pool       fleetPoolStats   `json:"pool"`
}

// sumReports adds up the reports of a fleet's processes: counts, errors
// by text, failures second by second.
func sumReports(rs []fleetReport) fleetSum {
	s := fleetSum{Processes: len(rs), Errors: map[string]int64{}}
	for _, r := range rs {
		s.Commits += r.Commits
		s.Failed += r.Failed
		for text, n := range r.Errors {
			s.Errors[text] += n
		}
		if len(r.PerSecond) > len(s.PerSecond) {
			s.PerSecond = append(s.PerSecond, make([]int64, len(r.PerSecond)-len(s.PerSecond))...)
		}
		for i, n := range r.PerSecond {
			s.PerSecond[i] += n
		}
		if len(r.CommitsPerSecond) > len(s.Commits1s) {
			s.Commits1s = append(s.Commits1s, make([]int64, len(r.CommitsPerSecond)-len(s.Commits1s))...)
		}
		for i, n := range r.CommitsPerSecond {
			s.Commits1s[i] += n
		}
		s.Failures = append(s.Failures, r.Failures...)
		s.Unrecorded += r.Unrecorded
		s.Pool.add(r.Pool)
	}
	return s
}

// perSecondRange is the least and the most failed calls in one second of
// the run.
func (s fleetSum) perSecondRange() (lo, hi int64) {
	if len(s.PerSecond) == 0 {
		return 0, 0
	}
	return slices.Min(s.PerSecond), slices.Max(s.PerSecond)
}

// errorCount is one error text and how many failed calls ended with it.
type errorCount struct {
	Text  string `json:"err"`
	Count int64  `json:"calls"`
}

// topErrors returns the n most frequent error texts of m, the most
// frequent first (ties by text).
func topErrors(m map[string]int64, n int) []errorCount {
	out := make([]errorCount, 0, len(m))
	for text, c := range m {
		out = append(out, errorCount{text, c})
	}
	slices.SortFunc(out, func(a, b errorCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Text, b.Text))
	})
	return out[:min(n, len(out))]
}

// The server's log lines for a connection refused for lack of slots.
var refusalTexts = []string{
	"sorry, too many clients already",
	"remaining connection slots are reserved",
}

// countRefusals counts the connections the server refused for lack of
// slots in its log, from byte offset from to the log's current end, and
// returns that end: the next count's offset.
func countRefusals(path string, from int64) (n int64, end int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, from, err
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return 0, from, err
	}
	r := bufio.NewReader(f)
	end = from
	for {
		line, err := r.ReadString('\n')
		if err == io.EOF && line != "" && !strings.HasSuffix(line, "\n") {
			// A line being written: left for the next count.
			return n, end, nil
		}
		end += int64(len(line))
		if slices.ContainsFunc(refusalTexts, func(t string) bool { return strings.Contains(line, t) }) {
			n++
		}
		if err == io.EOF {
			return n, end, nil
		}
		if err != nil {
			return n, end, err
		}
	}
}

// outage is a restart of the server as the bench saw it: it stopped the
// server at Down, and the server accepted connections again at Up.
type outage struct {
	Down, Up time.Time
}

// accepting tells whether the server accepted connections at t.
func (o outage) accepting(t time.Time) bool { return t.Before(o.Down) || !t.Before(o.Up) }

// restartVerdict counts a restart cell's failed calls: those whose
// deadline ended before the server was back (the only ones allowed to
// fail), the others, and those that started or ended while it was down.
type restartVerdict struct {
	Excused      int64 `json:"deadline_before_back"`
	NotExcused   int64 `json:"deadline_after_back"`
	StartedDown  int64 `json:"started_while_down"`
	EndedDown    int64 `json:"ended_while_down"`
	NotExcusedBy map[string]int64
}

// judgeRestart classifies failures of calls of the given timeout against
// the outage o. A call is excused when it ended after the server went down
// and its deadline came before the server was back.
func judgeRestart(failures []fleetFailure, timeout time.Duration, o outage) restartVerdict {
	v := restartVerdict{NotExcusedBy: map[string]int64{}}
	for _, f := range failures {
		start, end := time.Unix(0, f.Start), time.Unix(0, f.End)
		if !o.accepting(start) {
			v.StartedDown++
		}
		if !o.accepting(end) {
			v.EndedDown++
		}
		if !end.Before(o.Down) && !start.Add(timeout).After(o.Up) {
			v.Excused++
		} else {
			v.NotExcused++
			v.NotExcusedBy[f.Err]++
		}
	}
	return v
}
