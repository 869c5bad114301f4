package docscheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Section returns the text of doc's "## title" section, without its heading.
func Section(doc, title string) (string, bool) {
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "## "+title {
			continue
		}
		end := len(lines)
		for j := i + 1; j < len(lines); j++ {
			if strings.HasPrefix(lines[j], "## ") {
				end = j
				break
			}
		}
		return strings.Join(lines[i+1:end], "\n"), true
	}
	return "", false
}

var (
	goFile   = regexp.MustCompile(`^[A-Za-z0-9_/]+\.go$`)
	pkgDir   = regexp.MustCompile(`^(internal/[a-z0-9]+|[a-z0-9]+(/[a-z0-9]+)*)$`)
	funcName = regexp.MustCompile(`^[*]?([A-Z][A-Za-z0-9_]*)(\(\))?$`)
)

// CheckPath checks the items of a "path of one call": each file it names
// exists under root, each package directory it names holds Go source, and
// each exported name it gives is declared in a file or package the item
// names (in the root package when the item names no file).
func CheckPath(root, section string) []string {
	var bad []string
	items := map[string][]string{} // item text → its spans
	var order []string
	for _, s := range Spans(section) {
		if _, ok := items[s.Item]; !ok {
			order = append(order, s.Item)
		}
		items[s.Item] = append(items[s.Item], s.Text)
	}
	for _, item := range order {
		var files, dirs, names []string
		for _, sp := range items[item] {
			switch {
			case goFile.MatchString(sp):
				files = append(files, sp)
			case funcName.MatchString(sp):
				names = append(names, funcName.FindStringSubmatch(sp)[1])
			case pkgDir.MatchString(sp) && isGoDir(filepath.Join(root, sp)):
				dirs = append(dirs, sp)
			case strings.HasPrefix(sp, "internal/"):
				bad = append(bad, fmt.Sprintf("%s: no such package", sp))
			}
		}
		for _, f := range files {
			if _, err := os.Stat(filepath.Join(root, f)); err != nil {
				bad = append(bad, fmt.Sprintf("%s: no such file", f))
			}
		}
		if len(files) == 0 {
			dirs = append(dirs, ".")
		}
		for _, n := range names {
			if !declaredIn(root, n, files, dirs) {
				where := strings.Join(append(append([]string{}, files...), dirs...), ", ")
				bad = append(bad, fmt.Sprintf("%s: not declared in %s", n, where))
			}
		}
	}
	return bad
}

// CheckMap checks "the map": every package its table's first column names
// exists, and every internal package of the root module is in it.
func CheckMap(root, section string) []string {
	var bad []string
	named := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, s := range codeSpans(cells[1]) {
			sp := cells[1][s[0]:s[1]]
			dir := sp
			if sp == "pgtx" {
				dir = "."
			}
			named[dir] = true
			if !isGoDir(filepath.Join(root, dir)) {
				bad = append(bad, fmt.Sprintf("%s: no such package", sp))
			}
		}
	}
	entries, err := os.ReadDir(filepath.Join(root, "internal"))
	if err != nil {
		return append(bad, err.Error())
	}
	for _, e := range entries {
		dir := "internal/" + e.Name()
		if e.IsDir() && isGoDir(filepath.Join(root, dir)) && !named[dir] {
			bad = append(bad, fmt.Sprintf("%s: missing from the map", dir))
		}
	}
	sort.Strings(bad)
	return bad
}

// isGoDir reports whether dir holds non-test Go source.
func isGoDir(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !e.IsDir() && isSource(e.Name()) {
			return true
		}
	}
	return false
}

// declaredIn reports whether name is a top-level function, method, type,
// variable or constant of one of files or of a package in dirs.
func declaredIn(root, name string, files, dirs []string) bool {
	paths := make([]string, 0, len(files))
	for _, f := range files {
		paths = append(paths, filepath.Join(root, f))
	}
	for _, d := range dirs {
		entries, _ := os.ReadDir(filepath.Join(root, d))
		for _, e := range entries {
			if !e.IsDir() && isSource(e.Name()) {
				paths = append(paths, filepath.Join(root, d, e.Name()))
			}
		}
	}
	for _, p := range paths {
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			continue
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.Name == name {
					return true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.Name == name {
							return true
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.Name == name {
								return true
							}
						}
					}
				}
			}
		}
	}
	return false
}
