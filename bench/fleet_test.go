package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseFleet(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []fleetCell
		err  string
	}{
		{"16x4,64x2", []fleetCell{{16, 4}, {64, 2}}, ""},
		{" 64X2 , 16x4 ", []fleetCell{{64, 2}, {16, 4}}, ""},
		{"8 x 4,,", []fleetCell{{8, 4}}, ""},
		{"1x1", []fleetCell{{1, 1}}, ""},
		{"256x100", []fleetCell{{256, 100}}, ""},
		{"", nil, "no cell"},
		{" , ", nil, "no cell"},
		{"16", nil, `"16": want processes x MaxConns`},
		{"16*4", nil, `"16*4": want processes x MaxConns`},
		{"x4", nil, "two integers"},
		{"16x", nil, "two integers"},
		{"16x4.5", nil, "two integers"},
		{"ax4", nil, "two integers"},
		{"0x4", nil, "processes must be 1 to 256"},
		{"257x1", nil, "processes must be 1 to 256"},
		{"-1x4", nil, "processes must be 1 to 256"},
		{"16x0", nil, "MaxConns must be 1 to 100"},
		{"16x101", nil, "MaxConns must be 1 to 100"},
		{"16x4,64x2,16X4", nil, "16x4 is given twice"},
	} {
		got, err := parseFleet(c.in)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("parseFleet(%q): %v", c.in, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("parseFleet(%q) = %v, %v; want an error about %s", c.in, got, err, c.err)
		case c.err == "" && !slices.Equal(got, c.want):
			t.Errorf("parseFleet(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestParseArgsFleet(t *testing.T) {
	var stderr bytes.Buffer
	o, _, err := parseArgs(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if want := []fleetCell{{16, 4}, {64, 2}}; !slices.Equal(o.fleet, want) || o.fleetFit != (fleetCell{8, 4}) ||
		o.fleetDur != 30*time.Second || o.fleetWorkers != 4 || o.fleetRestart || o.fleetStrict {
		t.Errorf("defaults: -fleet %v -fleet-fit %v -fleet-dur %v -fleet-workers %d -fleet-restart %v -fleet-strict %v",
			o.fleet, o.fleetFit, o.fleetDur, o.fleetWorkers, o.fleetRestart, o.fleetStrict)
	}
	o, names, err := parseArgs([]string{"-fleet", "16x4", "-fleet-dur", "5s", "-fleet-strict", "fleet"}, &stderr)
	if err != nil || !slices.Equal(o.fleet, []fleetCell{{16, 4}}) || o.fleetDur != 5*time.Second || !o.fleetStrict ||
		!slices.Equal(names, []string{"fleet"}) {
		t.Errorf("the CI run's flags: %+v %v, %v", o, names, err)
	}
}

func TestRunBadFleet(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-fleet", "16"}, "bench: -fleet: "},
		{[]string{"-fleet", ""}, "bench: -fleet: no cell"},
		{[]string{"-fleet", "0x4"}, "bench: -fleet: "},
		{[]string{"-fleet", "16x4,16x4"}, "bench: -fleet: 16x4 is given twice"},
		{[]string{"-fleet-fit", "16x4"}, "bench: -fleet-fit: 16x4 wants 64 connections, more than the 47 slots"},
		{[]string{"-fleet-fit", "8"}, "bench: -fleet-fit: "},
		{[]string{"-fleet-dur", "0s"}, "bench: -fleet-dur must be positive"},
		{[]string{"-fleet-dur", "soon"}, "invalid value"},
		{[]string{"-fleet-workers", "0"}, "bench: -fleet-workers must be at least 1"},
		{[]string{"-fleet-strict=maybe"}, "invalid boolean value"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(append(c.args, "fleet"), &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2", c.args, code)
		}
		if !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: stderr %q does not say %q", c.args, stderr.String(), c.want)
		}
	}
}

func TestRunBadFleetWorker(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-dsn", "postgres://x", "-contender", "pgxpool"}, `-contender "pgxpool": want "pgtx" or "pgxpool loop"`},
		{[]string{"-contender", "pgtx"}, "-dsn is required"},
		{[]string{"-dsn", "postgres://x", "-conns", "0"}, "must be positive"},
		{[]string{"-dsn", "postgres://x", "-dur", "0s"}, "-dur must be positive"},
		{[]string{"-dsn", "postgres://x", "-failures", "-1"}, "-failures not negative"},
		{[]string{"-dsn", "postgres://x", "-start", "soon"}, "invalid value"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{fleetWorkerArg}, c.args...), &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2", c.args, code)
		}
		if !strings.Contains(stderr.String(), c.want) || stdout.Len() != 0 {
			t.Errorf("%q: stdout %q, stderr %q; want no report and %q", c.args, stdout.String(), stderr.String(), c.want)
		}
	}
}

func TestSumReports(t *testing.T) {
	for _, c := range []struct {
		name   string
		in     []fleetReport
		want   fleetSum
		lo, hi int64
		top    []errorCount
	}{
		{
			name: "none",
			in:   nil,
			want: fleetSum{Errors: map[string]int64{}},
		},
		{
			name: "two processes, seconds of different lengths",
			in: []fleetReport{
				{Commits: 100, Failed: 3, Errors: map[string]int64{"a": 2, "b": 1}, PerSecond: []int64{1, 0, 2},
					Failures: []fleetFailure{{1, 2, "a"}}, Unrecorded: 2, Pool: fleetPoolStats{MaxConns: 4, NewConns: 7, Transactions: 103}},
				{Commits: 50, Failed: 4, Errors: map[string]int64{"b": 3, "c": 1}, PerSecond: []int64{4, 0},
					Pool: fleetPoolStats{MaxConns: 4, NewConns: 5, AcquireTimeouts: 1}},
			},
			want: fleetSum{Processes: 2, Commits: 150, Failed: 7, Errors: map[string]int64{"a": 2, "b": 4, "c": 1},
				PerSecond: []int64{5, 0, 2}, Failures: []fleetFailure{{1, 2, "a"}}, Unrecorded: 2,
				Pool: fleetPoolStats{MaxConns: 8, NewConns: 12, Transactions: 103, AcquireTimeouts: 1}},
			lo: 0, hi: 5,
			top: []errorCount{{"b", 4}, {"a", 2}, {"c", 1}},
		},
		{
			name: "ties sorted by text",
			in: []fleetReport{
				{Failed: 4, Errors: map[string]int64{"z": 1, "y": 1, "x": 1, "w": 1}, PerSecond: []int64{2, 2}},
			},
			want: fleetSum{Processes: 1, Failed: 4, Errors: map[string]int64{"z": 1, "y": 1, "x": 1, "w": 1}, PerSecond: []int64{2, 2}},
			lo:   2, hi: 2,
			top: []errorCount{{"w", 1}, {"x", 1}, {"y", 1}, {"z", 1}},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := sumReports(c.in)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("sumReports = %+v\nwant %+v", got, c.want)
			}
			if lo, hi := got.perSecondRange(); lo != c.lo || hi != c.hi {
				t.Errorf("perSecondRange = %d–%d, want %d–%d", lo, hi, c.lo, c.hi)
			}
			if top := topErrors(got.Errors, fleetTopErrors); !slices.Equal(top, c.top) && len(top)+len(c.top) > 0 {
				t.Errorf("topErrors = %v, want %v", top, c.top)
			}
		})
	}
}

func TestCountErrorsKeepsFewTexts(t *testing.T) {
	m := map[string]int64{}
	for i := range fleetMaxTexts + 5 {
		countErrors(m, strings.Repeat("e", i+1), 2)
	}
	countErrors(m, "e", 1) // a text already kept is still counted under its own name
	if len(m) != fleetMaxTexts+1 || m[fleetOtherText] != 10 || m["e"] != 3 {
		t.Errorf("%d texts, %d other, %d of \"e\"; want %d, 10 and 3", len(m), m[fleetOtherText], m["e"], fleetMaxTexts+1)
	}
}

func TestCountRefusals(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.log")
	lines := []string{
		"2026-12-07 01:00:00.001 UTC [100] LOG:  database system is ready to accept connections\n",
		"2026-12-07 01:00:01.002 UTC [101] FATAL:  sorry, too many clients already\n",
		"2026-12-07 01:00:01.003 UTC [102] FATAL:  remaining connection slots are reserved for non-replication superuser connections\n",
		"2026-12-07 01:00:01.004 UTC [103] ERROR:  duplicate key value violates unique constraint\n",
		"2026-12-07 01:00:02.005 UTC [104] FATAL:  sorry, too many clients already\n",
	}
	write := func(s string) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	write(lines[0] + lines[1])
	first := int64(len(lines[0]) + len(lines[1]))
	write(lines[2] + lines[3] + lines[4])
	partial := "2026-12-07 01:00:03.006 UTC [105] FATAL:  sorry, too many cli"
	write(partial)
	size := first + int64(len(lines[2])+len(lines[3])+len(lines[4]))

	for _, c := range []struct {
		name    string
		from    int64
		want    int64
		wantEnd int64
	}{
		{"whole log, a line being written left out", 0, 3, size},
		{"from an offset", first, 2, size},
		{"from the end", size, 0, size},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, end, err := countRefusals(path, c.from)
			if err != nil || n != c.want || end != c.wantEnd {
				t.Errorf("countRefusals(%d) = %d, %d, %v; want %d, %d", c.from, n, end, err, c.want, c.wantEnd)
			}
		})
	}
	t.Run("the line completed", func(t *testing.T) {
		write("ents already\n")
		if n, _, err := countRefusals(path, size); err != nil || n != 1 {
			t.Errorf("after the line ended: %d, %v; want 1", n, err)
		}
	})
	t.Run("no log", func(t *testing.T) {
		if _, _, err := countRefusals(filepath.Join(t.TempDir(), "none.log"), 0); !os.IsNotExist(err) {
			t.Errorf("a missing log: %v, want a not-exist error", err)
		}
	})
}

func TestJudgeRestart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	o := outage{Down: t0.Add(10 * time.Second), Up: t0.Add(13 * time.Second)}
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	for _, c := range []struct {
		name string
		f    fleetFailure
		want restartVerdict
	}{
		{"before the restart", fleetFailure{at(5 * time.Second), at(6 * time.Second), "e"},
			restartVerdict{NotExcused: 1, NotExcusedBy: map[string]int64{"e": 1}}},
		{"its deadline ended while down", fleetFailure{at(9 * time.Second), at(11 * time.Second), "e"},
			restartVerdict{Excused: 1, EndedDown: 1, NotExcusedBy: map[string]int64{}}},
		{"started down, deadline at the return", fleetFailure{at(11 * time.Second), at(13 * time.Second), "e"},
			restartVerdict{Excused: 1, StartedDown: 1, NotExcusedBy: map[string]int64{}}},
		{"started down, deadline after the return", fleetFailure{at(12 * time.Second), at(12500 * time.Millisecond), "e"},
			restartVerdict{NotExcused: 1, StartedDown: 1, EndedDown: 1, NotExcusedBy: map[string]int64{"e": 1}}},
		{"after the return", fleetFailure{at(14 * time.Second), at(16 * time.Second), "f"},
			restartVerdict{NotExcused: 1, NotExcusedBy: map[string]int64{"f": 1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := judgeRestart([]fleetFailure{c.f}, 2*time.Second, o); !reflect.DeepEqual(got, c.want) {
				t.Errorf("judgeRestart = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestFleetStrictCheck(t *testing.T) {
	ok := fleetRun{Cell: "16x4", Contender: fleetPgtx, Shape: fleetCell{16, 4}}
	failedLoop := fleetRun{Cell: "16x4", Contender: fleetLoop, Shape: fleetCell{16, 4}, Sum: fleetSum{Failed: 9}}
	failed := ok
	failed.Sum.Failed, failed.Sum.PerSecond = 2, []int64{0, 1, 0, 1}
	excused := fleetRun{Cell: "8x4 restart", Contender: fleetPgtx, Shape: fleetCell{8, 4}, Restart: true,
		Sum: fleetSum{Failed: 3}, Verdict: &restartVerdict{Excused: 3}}
	notExcused := excused
	notExcused.Verdict = &restartVerdict{Excused: 2, NotExcused: 1}
	for _, c := range []struct {
		name string
		runs []fleetRun
		want string
	}{
		{"none failed", []fleetRun{ok, failedLoop}, ""},
		{"excused in the restart", []fleetRun{ok, excused}, ""},
		{"pgtx failed", []fleetRun{failed, excused}, "fleet 16x4 (16x4, 0 workers): pgtx failed 2 calls (second 2: 1, second 4: 1)"},
		{"not excused", []fleetRun{ok, notExcused}, "pgtx failed 1 calls whose deadline ended after the server was back"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := fleetStrictCheck(c.runs)
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("fleetStrictCheck = %v, want %q", err, c.want)
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{
		{"pgtx: gave up after 8 attempts in 1.79s (the context ended)", "pgtx: gave up after 8 attempts in … (the context ended)"},
		{"waited 250ms,\n then   900µs", "waited …, then …"},
		{"gave up after 1 attempt (retry budget exhausted): dial tcp 127.0.0.1:5432", "gave up after 1 attempt (retry budget exhausted): dial tcp 127.0.0.1:5432"},
		{"user=bench_fleet (SQLSTATE 53300)", "user=bench_fleet (SQLSTATE 53300)"},
		{strings.Repeat("x", fleetTextLen+10), strings.Repeat("x", fleetTextLen) + "…"},
	} {
		if got := errorText(errors.New(c.in)); got != c.want {
			t.Errorf("errorText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestWaitLogQuiet(t *testing.T) {
	dir := t.TempDir()
	quiet := filepath.Join(dir, "server.log")
	if err := os.WriteFile(quiet, []byte("LOG:  ready\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		path    string
		wantErr bool
	}{
		{"a log that does not grow", quiet, false},
		{"no log", filepath.Join(dir, "none.log"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := waitLogQuiet(t.Context(), c.path); (err != nil) != c.wantErr {
				t.Errorf("waitLogQuiet(%s) = %v, want an error: %v", c.path, err, c.wantErr)
			}
		})
	}
}

// TestMergeRuns: a fleet's slices add up to one run: counts and errors
// add, the seconds follow one another, and the pools' sizes are the last
// slice's.
func TestMergeRuns(t *testing.T) {
	slice := func(commits, failed int64, perSecond []int64, conns int64) fleetRun {
		return fleetRun{Dur: float64(len(perSecond)), Refused: failed, Sum: fleetSum{
			Commits: commits, Failed: failed, Errors: map[string]int64{"e": failed}, PerSecond: perSecond,
			Pool: fleetPoolStats{TotalConns: conns, SlotLimit: conns, AcquireCount: commits, SlotWaits: commits},
		}}
	}
	var acc fleetRun
	for i, r := range []fleetRun{slice(10, 1, []int64{1, 0}, 4), slice(20, 2, []int64{2}, 3), slice(30, 0, []int64{0, 0}, 2)} {
		acc = mergeRuns(acc, r, i == 0)
	}
	s := acc.Sum
	if acc.Dur != 5 || acc.Refused != 3 || s.Commits != 60 || s.Failed != 3 || s.Errors["e"] != 3 {
		t.Errorf("merged %+v: want 5s, 3 refused, 60 commits, 3 failed", acc)
	}
	if !slices.Equal(s.PerSecond, []int64{1, 0, 2, 0, 0}) {
		t.Errorf("per second %v, want the slices' seconds one after the other", s.PerSecond)
	}
	if s.Pool.TotalConns != 2 || s.Pool.SlotLimit != 2 || s.Pool.AcquireCount != 60 || s.Pool.SlotWaits != 60 {
		t.Errorf("pool %+v: want the last slice's size (2) and the counts added (60)", s.Pool)
	}
	if len(acc.Top) != 1 || acc.Top[0].Count != 3 {
		t.Errorf("top errors %+v, want e × 3", acc.Top)
	}
}
