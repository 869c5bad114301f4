package main

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeTable fails when README.md's performance table is not what
// `go run . readme` makes from RESULTS.md.
func TestReadmeTable(t *testing.T) {
	results, err := os.ReadFile("RESULTS.md")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := readmeTable(string(results))
	if err != nil {
		t.Fatal(err)
	}
	got, err := replaceTable(string(readme), want)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(readme) {
		i := strings.Index(string(readme), readmeBegin)
		j := strings.Index(string(readme), readmeEnd)
		t.Errorf("README.md's performance table differs from RESULTS.md's latest runs; run `cd bench && go run . readme`.\nREADME.md has:\n%s\nwant:\n%s",
			string(readme)[i:j+len(readmeEnd)], want)
	}
}

// TestParseResultsLatest picks the latest dated run of each table.
func TestParseResultsLatest(t *testing.T) {
	doc := strings.Join([]string{
		"# Results",
		"## Old runs (2026-11-01)",
		"### Overload storm: old",
		"| contender | of capacity |",
		"|---|--:|",
		"| pgtx | 10% |",
		"## A section (2026-12-01)",
		"#### The run (17:34 UTC)",
		"#### Overload storm: newer",
		"| contender | of capacity |",
		"|---|--:|",
		"| pgtx | 30% |",
		"## Notes without a date",
		"### Overload storm: undated",
		"| contender | of capacity |",
		"|---|--:|",
		"| pgtx | 99% |",
		"## Earlier the same day (2026-12-01)",
		"#### Run of 2026-12-01 09:00 UTC",
		"#### Overload storm: earlier",
		"| contender | of capacity |",
		"|---|--:|",
		"| pgtx | 20% |",
	}, "\n")
	tb, err := latest(parseResults(doc), "Overload storm")
	if err != nil {
		t.Fatal(err)
	}
	if tb.when != "2026-12-01 17:34 UTC" {
		t.Errorf("when = %q, want 2026-12-01 17:34 UTC", tb.when)
	}
	got, err := tb.cells("of capacity", 0, "pgtx")
	if err != nil || len(got) != 1 || got[0] != "30%" {
		t.Errorf("cells = %q, %v; want [30%%]", got, err)
	}
	if _, err := latest(parseResults(doc), "Cancel:"); err == nil {
		t.Error("latest of a missing table: no error")
	}
}
