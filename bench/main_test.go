package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestParseWorkers(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
		err  string
	}{
		{"8,32,128", []int{8, 32, 128}, ""},
		{" 32 , 8 ", []int{8, 32}, ""},
		{"1", []int{1}, ""},
		{"8,,32,", []int{8, 32}, ""},
		{"", nil, "no worker count"},
		{" , ", nil, "no worker count"},
		{"0", nil, `"0" is not a positive integer`},
		{"-8", nil, `"-8" is not a positive integer`},
		{"8,x", nil, `"x" is not a positive integer`},
		{"8.5", nil, `"8.5" is not a positive integer`},
		{"8,32,8", nil, "8 is given twice"},
	} {
		got, err := parseWorkers(c.in)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("parseWorkers(%q): %v", c.in, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("parseWorkers(%q) = %v, %v; want an error about %s", c.in, got, err, c.err)
		case c.err == "" && !slices.Equal(got, c.want):
			t.Errorf("parseWorkers(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestParseArgsWorkers(t *testing.T) {
	var stderr bytes.Buffer
	o, _, err := parseArgs(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{8, 32, 128}; !slices.Equal(o.workers, want) {
		t.Errorf("default -workers = %v, want %v", o.workers, want)
	}
	if o, _, err = parseArgs([]string{"-workers", "16,4", "contention"}, &stderr); err != nil || !slices.Equal(o.workers, []int{4, 16}) {
		t.Errorf("-workers 16,4: %v, %v", o.workers, err)
	}
}

func TestRunBadWorkers(t *testing.T) {
	for _, arg := range []string{"0", "8,abc", "", "8,8"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"-workers", arg, "contention"}, &stdout, &stderr); code != 2 {
			t.Errorf("-workers %q: exit %d, want 2", arg, code)
		}
		if !strings.Contains(stderr.String(), "bench: -workers: ") {
			t.Errorf("-workers %q: stderr %q does not name the flag", arg, stderr.String())
		}
	}
}

func TestConnectionsNeeded(t *testing.T) {
	plans := []cellPlan{hotPlan(8), hotPlan(32), hotPlan(128), lowPlan()}
	need, worst := connectionsNeeded(plans, 10)
	// 128 workers: pgtx, pgtx without the manager and the pgx pool, then
	// pgbench's clients.
	if need != 3*128+128+10 || worst.workers != 128 {
		t.Errorf("need %d at %d workers, want %d at 128", need, worst.workers, 3*128+128+10)
	}
	if need, _ := connectionsNeeded([]cellPlan{hotPlan(32)}, 10); need != 4*32+32+10 {
		t.Errorf("32 workers: need %d, want %d", need, 4*32+32+10)
	}
	if p := hotPlan(128); p.extras || !p.naive || !p.ceiling {
		t.Errorf("hotPlan(128) = %+v: want the naive loop and the ceiling, no extras", p)
	}
	if p := lowPlan(); p.extras || p.naive || p.ceiling || p.accounts != lowAccounts || !slices.Equal(p.variants, []string{variantOrdered}) {
		t.Errorf("lowPlan() = %+v", p)
	}
}

func TestContentionChartCells(t *testing.T) {
	var rows []contentionRow
	for _, w := range []int{8, 32, 128} {
		for _, v := range []string{variantOrdered, variantRandom} {
			rows = append(rows,
				contentionRow{Variant: v, Workers: w, Accounts: hotAccounts, Contender: namePgtx, CommitsPerS: 1000},
				contentionRow{Variant: v, Workers: w, Accounts: hotAccounts, Contender: namePgtxNoManager, CommitsPerS: 900},
				contentionRow{Variant: v, Workers: w, Accounts: hotAccounts, Contender: namePgbench, CommitsPerS: 800})
		}
		rows = append(rows, contentionRow{Variant: variantCeiling, Workers: w, Accounts: hotAccounts, Contender: nameCeiling, CommitsPerS: 2000})
	}
	rows = append(rows, contentionRow{Variant: variantOrdered, Workers: 8, Accounts: lowAccounts, Contender: namePgtx, CommitsPerS: 54321})
	svg := string(contentionChart(rows))
	for _, want := range []string{"8 workers", "32 workers", "128 workers", namePgtxNoManager, "#90cdf4", namePgbench, "#d53f8c", "stroke-dasharray", "ceiling 2,000"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if strings.Contains(svg, "54,321") {
		t.Error("chart draws the low-contention cell")
	}
}

func TestContentionTablesCells(t *testing.T) {
	m := &managerState{Limiting: true, Limit: 3, Summary: "limiting, limit 3"}
	rows := []contentionRow{
		{Variant: variantOrdered, Workers: 128, Accounts: hotAccounts, Contender: namePgtx, Manager: m, Invariant: "unchanged"},
		{Variant: variantOrdered, Workers: 128, Accounts: hotAccounts, Contender: namePgbench, Failed: 2, Causes: map[string]int64{"40001": 2}, Invariant: "unchanged"},
		{Variant: variantOrdered, Workers: lowWorkers, Accounts: lowAccounts, Contender: namePgtx, Manager: &managerState{Summary: "not limiting"}, Invariant: "unchanged"},
	}
	ts := contentionTables(rows, options{}, "100ms")
	if len(ts) != 4 {
		t.Fatalf("%d tables, want 4", len(ts))
	}
	if !strings.Contains(ts[0].Note, "128 workers: limiting, limit 3") || !strings.Contains(ts[0].Note, "after the interleaved slices") {
		t.Errorf("ordered note: %s", ts[0].Note)
	}
	if len(ts[0].Rows) != 2 || ts[0].Rows[1][1] != namePgbench || ts[0].Rows[1][6] != "2 (40001 2)" || ts[0].Rows[1][8] != "—" {
		t.Errorf("ordered rows: %q", ts[0].Rows)
	}
	low := ts[3]
	if !strings.HasPrefix(low.Title, "Low contention: 1,000 accounts, 8 workers") || len(low.Rows) != 1 ||
		len(low.Rows[0]) != len(low.Header) || slices.Contains(low.Header, "of ceiling") || !strings.Contains(low.Note, "not limiting") {
		t.Errorf("low table: %+v", low)
	}
}

func TestSQLTables(t *testing.T) {
	s := newSpread([]float64{0.9, 1.0, 1.1, 1.2, 1.3})
	rows := []sqlRow{{Library: libSQL, Workers: 8, Own: nameSQLOwn, Module: nameSQLPgtx, OwnTPS: s, ModuleTPS: s, Ratio: s,
		OwnRoundTrips: 3, ModuleRoundTrips: 2, OwnCalls: 10, ModuleCalls: 11, ModuleFailed: 1}}
	tb := sqlTable(sqlWorkloads[0], rows, 5)
	if len(tb.Rows) != 1 || len(tb.Rows[0]) != len(tb.Header) {
		t.Fatalf("sql table: %+v", tb)
	}
	if got := tb.Rows[0][6]; got != "1.100× [0.900–1.300]" {
		t.Errorf("ratio cell %q", got)
	}
	if got := tb.Rows[0][8]; got != "3.00 → 2.00" {
		t.Errorf("round trips cell %q", got)
	}
	if !strings.Contains(tb.Note, "above 1× the module is faster") {
		t.Errorf("note does not say the ratio's direction: %s", tb.Note)
	}
	c := sqlContentionTable([]sqlContentionRow{
		{contentionRow: contentionRow{Variant: variantOrdered, Workers: 8, Contender: nameSQLPgtx, VsJitter: 1.2, Invariant: "unchanged"}, RoundRatio: &s},
		{contentionRow: contentionRow{Variant: variantOrdered, Workers: 8, Contender: nameSQLJitter, VsJitter: 1, Failed: 2, Causes: map[string]int64{"40001": 2}, Invariant: "unchanged"}},
	}, "100ms")
	if len(c.Rows) != 2 || c.Rows[0][5] != "1.10× [0.90–1.30]" || c.Rows[1][5] != "—" || c.Rows[1][7] != "2 (40001 2)" || !strings.Contains(c.Note, "deadlock_timeout was 100ms") {
		t.Errorf("contention table: %q", c.Rows)
	}
}
