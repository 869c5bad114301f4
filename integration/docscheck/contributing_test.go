package docscheck

import (
	"slices"
	"strings"
	"testing"
)

// TestContributingPaths checks that the files, packages and functions
// CONTRIBUTING.md's "The map" and "The path of one call" name are there.
func TestContributingPaths(t *testing.T) {
	doc := readDoc(t, "CONTRIBUTING.md")
	for _, c := range []struct {
		title string
		check func(root, section string) []string
	}{
		{"The map", CheckMap},
		{"The path of one call", CheckPath},
	} {
		section, ok := Section(doc, c.title)
		if !ok {
			t.Errorf("CONTRIBUTING.md has no section %q", c.title)
			continue
		}
		for _, p := range c.check(root, section) {
			t.Errorf("CONTRIBUTING.md, %q: %s", c.title, p)
		}
	}
}

// TestCheckPathFindsMissing runs CheckPath and CheckMap on sections of
// their own.
func TestCheckPathFindsMissing(t *testing.T) {
	path := strings.Join([]string{
		"1. `Transaction` (`tx.go`) checks its input.",
		"2. It acquires a connection (`internal/acquire`, through `nosuch.go`).",
		"3. `Teleport` (`tx.go`) moves the data.",
		"4. The error is classified (`internal/classify`, through `Classify`); `*RetryError` says why.",
		"5. Work runs (`internal/nosuchpkg`).",
	}, "\n")
	want := []string{
		"nosuch.go: no such file",
		"Teleport: not declared in tx.go",
		"internal/nosuchpkg: no such package",
	}
	if got := CheckPath(root, path); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("CheckPath:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	m := "| package | job |\n|---|---|\n| `pgtx` (root) | the API |\n| `internal/nosuch` | nothing |\n"
	got := CheckMap(root, m)
	if len(got) == 0 || got[0] != "internal/acked: missing from the map" || !strings.Contains(strings.Join(got, "\n"), "internal/nosuch: no such package") {
		t.Errorf("CheckMap: %q", got)
	}
	files := m + "\n| file | what it holds |\n|---|---|\n" +
		"| `tx.go` | `Transaction`, `validateCall`, `Teleport`, `Options.override`, `Options.nosuch` |\n" +
		"| `pool.go` | `NewWithConfig`, the pool's `retry.Loop` and `retry.Nosuch`, from `config.go` and `nosuch.go` |\n" +
		"| `gone.go` | nothing |\n"
	got = CheckMap(root, files)
	for _, want := range []string{
		"Teleport: not declared in tx.go",
		// override is retry.go's: a file row answers for its own files only.
		"Options.override: Options has no method override in tx.go",
		"Options.nosuch: Options has no method nosuch in tx.go",
		"retry.Nosuch: github.com/pgtx-go/pgtx/internal/retry declares no Nosuch",
		"nosuch.go: no such file",
		"gone.go: no such file",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("CheckMap: %q, want %q", got, want)
		}
	}
	for _, ok := range []string{"Transaction", "validateCall", "NewWithConfig", "retry.Loop", "config.go"} {
		for _, g := range got {
			if strings.HasPrefix(g, ok+":") {
				t.Errorf("CheckMap: %q, a name that is there", g)
			}
		}
	}
}
