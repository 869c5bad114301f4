// Package releasecheck holds the test that the places naming the release
// agree: README's version and install lines, RELEASING.md's table,
// CHANGELOG.md's latest released heading and the go.mod requires between
// the modules. CHANGELOG.md may open with the section of the version being
// prepared, "## vX.Y.Z — Unreleased", newer than the release.
package releasecheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// module is a row of RELEASING.md's table of released modules.
type module struct{ path, dir, tag string }

var (
	tableHead   = regexp.MustCompile(`(?m)^\| module \| directory \| tag for (v\S+) \|$`)
	tableRow    = regexp.MustCompile("(?m)^\\| `(github\\.com/pgtx-go/pgtx[^`]*)` \\| `([^`]+)` \\| `([^`]+)` \\|$")
	readmeVer   = regexp.MustCompile(`\*\*(v\d+\.\d+\.\d+)\*\*`)
	installLine = regexp.MustCompile(`(?m)^go get (github\.com/pgtx-go/pgtx[a-z/]*)@(\S+)`)
	heading     = regexp.MustCompile(`(?m)^## (v(\d+)\.(\d+)\.(\d+))\b(.*)$`)
	requireLine = regexp.MustCompile(`(?m)^\s*(?:require\s+)?(github\.com/pgtx-go/pgtx(?:/[a-z/]+)?) (v\S+)$`)
)

// check returns each disagreement between the release's places: the
// version RELEASING.md's table is for is the one every other place must
// name. gomods maps a module directory (as the table writes it) to its
// go.mod; those of modules never released may be among them.
func check(readme, releasing, changelog string, gomods map[string]string) []string {
	var bad []string
	m := tableHead.FindStringSubmatch(releasing)
	if m == nil {
		return []string{"RELEASING.md has no table headed '| module | directory | tag for vX.Y.Z |'"}
	}
	version := m[1]
	var mods []module
	for _, r := range tableRow.FindAllStringSubmatch(releasing, -1) {
		mods = append(mods, module{path: r[1], dir: r[2], tag: r[3]})
	}
	if len(mods) == 0 {
		bad = append(bad, "RELEASING.md's table lists no module")
	}
	released := map[string]bool{}
	for _, md := range mods {
		released[md.path] = true
		want := md.dir + "/" + version
		if md.dir == "." {
			want = version
		}
		if md.tag != want {
			bad = append(bad, fmt.Sprintf("RELEASING.md: %s's tag is %s, want %s", md.path, md.tag, want))
		}
		gm, ok := gomods[md.dir]
		if !ok {
			bad = append(bad, fmt.Sprintf("RELEASING.md: %s's directory %s has no go.mod", md.path, md.dir))
		} else if got := modulePath(gm); got != md.path {
			bad = append(bad, fmt.Sprintf("RELEASING.md: directory %s holds module %q, not %s", md.dir, got, md.path))
		}
	}

	if v := readmeVer.FindStringSubmatch(readme); v == nil || v[1] != version {
		bad = append(bad, fmt.Sprintf("README.md's version is %v, RELEASING.md's table is for %s", first(v), version))
	}
	installed := map[string]bool{}
	for _, l := range installLine.FindAllStringSubmatch(readme, -1) {
		installed[l[1]] = true
		if l[2] != version {
			bad = append(bad, fmt.Sprintf("README.md installs %s@%s, not @%s", l[1], l[2], version))
		}
		if !released[l[1]] {
			bad = append(bad, fmt.Sprintf("README.md installs %s, which RELEASING.md's table does not release", l[1]))
		}
	}
	for _, md := range mods {
		if !installed[md.path] {
			bad = append(bad, fmt.Sprintf("README.md has no install line for %s", md.path))
		}
	}

	bad = append(bad, checkChangelog(changelog, version)...)

	dirs := make([]string, 0, len(gomods))
	for d := range gomods {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		for _, r := range requireLine.FindAllStringSubmatch(gomods[d], -1) {
			if released[r[1]] && r[2] != version {
				bad = append(bad, fmt.Sprintf("%s/go.mod requires %s %s, not %s", d, r[1], r[2], version))
			}
		}
	}
	return bad
}

// checkChangelog returns the disagreements of CHANGELOG.md with the
// release version: its latest released heading must be version's. Only
// the first heading may be "— Unreleased", and its version must be newer.
func checkChangelog(changelog, version string) []string {
	var bad []string
	hs := heading.FindAllStringSubmatch(changelog, -1)
	if len(hs) > 0 && unreleased(hs[0]) {
		if !newer(hs[0][2:5], version) {
			bad = append(bad, fmt.Sprintf("CHANGELOG.md's unreleased %s is not newer than %s, the release", hs[0][1], version))
		}
		hs = hs[1:]
	}
	for _, h := range hs {
		if unreleased(h) {
			bad = append(bad, fmt.Sprintf("CHANGELOG.md's %s is unreleased but not its first section", h[1]))
		}
	}
	var released []string
	if len(hs) > 0 {
		released = hs[0]
	}
	if released == nil || released[1] != version {
		bad = append(bad, fmt.Sprintf("CHANGELOG.md's latest released heading is for %v, RELEASING.md's table for %s", first(released), version))
	}
	return bad
}

// unreleased reports whether a heading's match is of a version not yet
// released: its text after the version says "Unreleased".
func unreleased(h []string) bool { return strings.Contains(h[5], "Unreleased") }

// newer reports whether the version of major, minor and patch numbers
// is after the version v ("vX.Y.Z").
func newer(numbers []string, v string) bool {
	var a, b [3]int
	for i, n := range numbers {
		fmt.Sscan(n, &a[i])
	}
	if _, err := fmt.Sscanf(v, "v%d.%d.%d", &b[0], &b[1], &b[2]); err != nil {
		return false
	}
	return slices.Compare(a[:], b[:]) > 0
}

func first(m []string) string {
	if m == nil {
		return "none"
	}
	return m[1]
}

func modulePath(gomod string) string {
	for _, l := range strings.Split(gomod, "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.TrimSpace(p)
		}
	}
	return ""
}

// TestReleasePlacesAgree reads the repository's files: README.md,
// RELEASING.md, CHANGELOG.md and every go.mod of the workspace.
func TestReleasePlacesAgree(t *testing.T) {
	root := filepath.Join("..", "..")
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	gomods := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			rel, err := filepath.Rel(root, filepath.Dir(p))
			if err != nil {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			gomods[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := gomods["."]; !ok {
		t.Fatalf("no go.mod at the repository root %s", root)
	}
	for _, b := range check(read("README.md"), read("RELEASING.md"), read("CHANGELOG.md"), gomods) {
		t.Error(b)
	}
}

func TestCheckFindsDisagreement(t *testing.T) {
	releasing := "| module | directory | tag for v1.0.0 |\n|---|---|---|\n" +
		"| `github.com/pgtx-go/pgtx` | `.` | `v1.0.0` |\n" +
		"| `github.com/pgtx-go/pgtx/pgtxotel` | `pgtxotel` | `pgtxotel/v1.0.0` |\n"
	readme := "Version **v1.0.0**.\n\n```sh\ngo get github.com/pgtx-go/pgtx@v1.0.0  # core\ngo get github.com/pgtx-go/pgtx/pgtxotel@v1.0.0\n```\n"
	changelog := "# Changelog\n\n## v1.0.0 — 2026-12-07\n\n## v0.3.0 — 2026-12-02\n"
	gomods := map[string]string{
		".":           "module github.com/pgtx-go/pgtx\n",
		"pgtxotel":    "module github.com/pgtx-go/pgtx/pgtxotel\n\nrequire github.com/pgtx-go/pgtx v1.0.0\n",
		"integration": "module github.com/pgtx-go/pgtx/integration\n\nrequire (\n\tgithub.com/pgtx-go/pgtx v1.0.0\n\tgithub.com/pgtx-go/pgtx/examples v0.0.0\n)\n",
	}
	for _, cl := range []string{changelog, "# Changelog\n\n## v1.1.0 — Unreleased\n\n### Added\n\n" + changelog[len("# Changelog\n\n"):],
		"## v2.0.0 — Unreleased\n\n" + changelog, "## v1.0.1 — Unreleased\n\n" + changelog} {
		if bad := check(readme, releasing, cl, gomods); len(bad) != 0 {
			t.Fatalf("agreeing places, CHANGELOG.md opening %q: %q", cl[:min(len(cl), 40)], bad)
		}
	}
	with := func(gm map[string]string, dir, text string) map[string]string {
		c := map[string]string{}
		for k, v := range gm {
			c[k] = v
		}
		c[dir] = text
		return c
	}
	tests := []struct {
		name                         string
		readme, releasing, changelog string
		gomods                       map[string]string
		want                         string
	}{
		{"readme version", strings.Replace(readme, "**v1.0.0**", "**v0.3.0**", 1), releasing, changelog, gomods, "README.md's version is v0.3.0"},
		{"install version", strings.Replace(readme, "pgtxotel@v1.0.0", "pgtxotel@v0.3.0", 1), releasing, changelog, gomods, "installs github.com/pgtx-go/pgtx/pgtxotel@v0.3.0"},
		{"install missing", strings.Replace(readme, "go get github.com/pgtx-go/pgtx/pgtxotel@v1.0.0\n", "", 1), releasing, changelog, gomods, "no install line for github.com/pgtx-go/pgtx/pgtxotel"},
		{"install unreleased", readme + "go get github.com/pgtx-go/pgtx/pgtxextra@v1.0.0\n", releasing, changelog, gomods, "which RELEASING.md's table does not release"},
		{"table tag", readme, strings.Replace(releasing, "`pgtxotel/v1.0.0`", "`pgtxotel/v0.3.0`", 1), changelog, gomods, "tag is pgtxotel/v0.3.0"},
		{"changelog", readme, releasing, strings.Replace(changelog, "## v1.0.0 — 2026-12-07\n\n", "", 1), gomods, "latest released heading is for v0.3.0"},
		{"unreleased, then an old release", readme, releasing, "## v1.1.0 — Unreleased\n\n## v0.3.0 — 2026-12-02\n", gomods, "latest released heading is for v0.3.0"},
		{"unreleased, not newer", readme, releasing, "## v1.0.0 — Unreleased\n\n" + changelog, gomods, "unreleased v1.0.0 is not newer than v1.0.0"},
		{"unreleased, older", readme, releasing, "## v0.9.9 — Unreleased\n\n" + changelog, gomods, "unreleased v0.9.9 is not newer"},
		{"unreleased, not first", readme, releasing, strings.Replace(changelog, "## v0.3.0 — 2026-12-02", "## v0.3.0 — Unreleased", 1), gomods, "v0.3.0 is unreleased but not its first section"},
		{"only unreleased", readme, releasing, "## v1.1.0 — Unreleased\n", gomods, "latest released heading is for none"},
		{"require", readme, releasing, changelog, with(gomods, "pgtxotel", "module github.com/pgtx-go/pgtx/pgtxotel\n\nrequire github.com/pgtx-go/pgtx v0.3.0\n"), "pgtxotel/go.mod requires github.com/pgtx-go/pgtx v0.3.0"},
		{"directory", readme, releasing, changelog, with(gomods, "pgtxotel", "module example.com/other\n"), `holds module "example.com/other"`},
		{"no table", readme, "# Releasing\n", changelog, gomods, "has no table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := check(tt.readme, tt.releasing, tt.changelog, tt.gomods)
			if !slices.ContainsFunc(bad, func(b string) bool { return strings.Contains(b, tt.want) }) {
				t.Errorf("check = %q, want one containing %q", bad, tt.want)
			}
		})
	}
}
