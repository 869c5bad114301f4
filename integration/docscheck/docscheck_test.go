package docscheck

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const root = "../.."

var (
	apiOnce    sync.Once
	currentAPI *API
	baseAPI    *API
	apiErr     error
)

// apis loads the repository's API and the last release's, once per binary.
func apis(t *testing.T) (*API, *API) {
	t.Helper()
	apiOnce.Do(func() {
		if currentAPI, apiErr = Load(root, "."); apiErr != nil {
			return
		}
		_, commit, err := PreviousRelease(root)
		if err != nil {
			apiErr = err
			return
		}
		baseAPI = NewAPI()
		apiErr = LoadCommit(baseAPI, root, commit)
	})
	if apiErr != nil {
		t.Fatal(apiErr)
	}
	return currentAPI, baseAPI
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// inBreakingChanges reports whether a span is under a "Breaking changes"
// heading.
func inBreakingChanges(s Span) bool { return strings.EqualFold(s.Section, "Breaking changes") }

// TestDocIdentifiers resolves every Go name in backquotes in README.md,
// docs/*.md, CHANGELOG.md's newest section and CONTRIBUTING.md.
func TestDocIdentifiers(t *testing.T) {
	cur, base := apis(t)
	c := &Checker{Current: cur, Base: base}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md", "CONTRIBUTING.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, filepath.ToSlash(rel))
	}
	var problems []Problem
	for _, f := range files {
		problems = append(problems, c.Check(f, readDoc(t, f), 0, nil)...)
	}
	newest, line := NewestSection(readDoc(t, "CHANGELOG.md"))
	problems = append(problems, c.Check("CHANGELOG.md", newest, line-1, inBreakingChanges)...)
	for _, p := range problems {
		t.Error(p)
	}
}

// TestCheckerFindsMadeUpNames runs the checker on a document of its own,
// whose breaking changes are those of v1.0.0 against v0.3.0 (whatever
// release CHANGELOG.md prepares now): v0.3.0 had multitracer and
// pgtxtest.NewDatabaseOn.
func TestCheckerFindsMadeUpNames(t *testing.T) {
	cur, _ := apis(t)
	commit, err := ReleaseCommit(root, "v0.3.0")
	if err != nil {
		t.Fatal(err)
	}
	base := NewAPI()
	if err := LoadCommit(base, root, commit); err != nil {
		t.Fatal(err)
	}
	c := &Checker{Current: cur, Base: base}
	doc := strings.Join([]string{
		"# A guide",
		"",
		"Call `pgtx.Transaction(ctx, pool, pgtx.Serializable, fn)` with `pgtx.Options{ReadOnly: true}`;",
		"set `Config.Retry.MaxRetries` or `Retry.MaxRetries`, read `Pool.Stats`, `ResolveStats.UnknownCount`,",
		"`pgx.Tx`, `pgxpool.Config.MaxConns`, `*pgtx.Pool`, `errors.Is`, `faultproxy.Proxy.FailCommits`.",
		"Not Go: `tx.go`, `select 1`, `pg_stat_activity.query`, `pgtx.transaction.count`, `go test ./...`,",
		"`ResolveTimeout: -1`, `github.com/pgtx-go/pgtx/tracers`, `e.g.`, `1.07×`.",
		"",
		"Made up: `pgtx.TransactionFast`, `Pool.Teleport`, `Config.Retry.MaxTries`, `pgtxtest.Proxy.RejectNew`,",
		"`FrobnicateTheWidget`, `multitracer`, `github.com/pgtx-go/pgtx/nosuchpkg`, `pgtx.Options{ReadOnly: true, Frozen: true}`.",
		"",
		"### Breaking changes",
		"- Package `multitracer` is removed: `multitracer.New(a, b)` becomes `tracers.Join(a, b)`.",
		"- `pgtxtest.NewDatabaseOn` removed → `pgtxtest.NewDatabase`; `pgtxtest.NoSuchOldName` → `pgtxtest.NewDatabase`.",
		"- `pgtxtest.Shared` is still here.",
	}, "\n")
	got := map[string]bool{}
	for _, p := range c.Check("guide.md", doc, 0, inBreakingChanges) {
		got[p.Name] = true
	}
	want := []string{
		"pgtx.TransactionFast", "Pool.Teleport", "Config.Retry.MaxTries", "pgtxtest.Proxy.RejectNew",
		"FrobnicateTheWidget", "multitracer", "github.com/pgtx-go/pgtx/nosuchpkg",
		"pgtxtest.NoSuchOldName", "pgtxtest.Shared", "pgtx.Options.Frozen",
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("%s: not reported", w)
		}
		delete(got, w)
	}
	for n := range got {
		t.Errorf("%s: reported, but it exists", n)
	}
}
