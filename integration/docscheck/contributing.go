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
	// mapName is a name as the map's file rows give it: `validateCall`,
	// `Pool.newCall`, `retry.Loop`, `*RetryError`, `call.run()`.
	mapName = regexp.MustCompile(`^[*]?([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?(?:\(\))?$`)
)

// CheckPath checks the items of a "path of one call": each file it names
// exists under root, each package directory it names holds Go source, each
// exported name it gives is declared in a file or package the item names
// (in the root package when the item names no file), and each
// `Type.method` whose type is declared there has that method.
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
		var files, dirs, names, methods []string
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
			case mapName.MatchString(sp) && strings.Contains(sp, "."):
				methods = append(methods, sp)
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
		d := parseDecls(root, files, append([]string{"."}, dirs...))
		for _, n := range names {
			if !declaredIn(root, n, files, dirs) {
				where := strings.Join(append(append([]string{}, files...), dirs...), ", ")
				bad = append(bad, fmt.Sprintf("%s: not declared in %s", n, where))
			}
		}
		for _, m := range methods {
			// Only a type of ours is checked: `pgx.Tx` is pgx's.
			if p := d.resolve(root, m); p != "" && d.types[typeOf(m)] {
				bad = append(bad, p)
			}
		}
	}
	return bad
}

// CheckMap checks "the map": every package its tables' first column names
// exists, every internal package of the root module is in it, and every
// file a row names (a first column of .go files) exists and declares each
// name the row's second column gives.
func CheckMap(root, section string) []string {
	var bad []string
	named := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		var files []string
		for _, s := range codeSpans(cells[1]) {
			sp := cells[1][s[0]:s[1]]
			if goFile.MatchString(sp) {
				files = append(files, sp)
				if _, err := os.Stat(filepath.Join(root, sp)); err != nil {
					bad = append(bad, fmt.Sprintf("%s: no such file", sp))
				}
				continue
			}
			dir := sp
			if sp == "pgtx" {
				dir = "."
			}
			named[dir] = true
			if !isGoDir(filepath.Join(root, dir)) {
				bad = append(bad, fmt.Sprintf("%s: no such package", sp))
			}
		}
		if len(files) == 0 {
			continue
		}
		d := parseDecls(root, files, nil)
		for _, s := range codeSpans(cells[2]) {
			sp := cells[2][s[0]:s[1]]
			if goFile.MatchString(sp) {
				if _, err := os.Stat(filepath.Join(root, sp)); err != nil {
					bad = append(bad, fmt.Sprintf("%s: no such file", sp))
				}
				continue
			}
			if !mapName.MatchString(sp) {
				continue
			}
			if p := d.resolve(root, sp); p != "" {
				bad = append(bad, p)
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

// decls are the top-level declarations of some files: names, methods by
// receiver type, types, and the packages the files import by name.
type decls struct {
	where   string
	names   map[string]bool
	methods map[string]bool // "Type.method"
	types   map[string]bool
	imports map[string]string // name → import path
}

// parseDecls reads the declarations of files and of the packages in dirs
// (relative to root).
func parseDecls(root string, files, dirs []string) decls {
	d := decls{where: strings.Join(files, ", "), names: map[string]bool{}, methods: map[string]bool{}, types: map[string]bool{}, imports: map[string]string{}}
	paths := make([]string, 0, len(files))
	for _, f := range files {
		paths = append(paths, filepath.Join(root, f))
	}
	for _, dir := range dirs {
		entries, _ := os.ReadDir(filepath.Join(root, dir))
		for _, e := range entries {
			if !e.IsDir() && isSource(e.Name()) {
				paths = append(paths, filepath.Join(root, dir, e.Name()))
			}
		}
	}
	for _, p := range paths {
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			continue
		}
		for _, im := range f.Imports {
			path := strings.Trim(im.Path.Value, `"`)
			name := filepath.Base(path)
			if im.Name != nil {
				name = im.Name.Name
			}
			d.imports[name] = path
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv != nil && len(decl.Recv.List) == 1 {
					d.methods[recvName(decl.Recv.List[0].Type)+"."+decl.Name.Name] = true
				} else {
					d.names[decl.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range decl.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						d.names[s.Name.Name] = true
						d.types[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							d.names[n.Name] = true
						}
					}
				}
			}
		}
	}
	return d
}

// typeOf is the first element of a span `Type.method`.
func typeOf(span string) string {
	return mapName.FindStringSubmatch(span)[1]
}

// resolve returns a problem with span, a name mapName matches, or "" when d
// declares it: a name of its own, a method of its type, or a name of a
// package of this repository it imports (`retry.Loop`).
func (d decls) resolve(root, span string) string {
	m := mapName.FindStringSubmatch(span)
	name, member := m[1], m[2]
	switch {
	case member == "" && d.names[name]:
		return ""
	case member == "":
		return fmt.Sprintf("%s: not declared in %s", span, d.where)
	case d.methods[name+"."+member]:
		return ""
	case d.types[name]:
		return fmt.Sprintf("%s: %s has no method %s in %s", span, name, member, d.where)
	}
	if path, ok := d.imports[name]; ok {
		rel, ours := strings.CutPrefix(path, "github.com/pgtx-go/pgtx/")
		if !ours || declaredIn(root, member, nil, []string{rel}) {
			return ""
		}
		return fmt.Sprintf("%s: %s declares no %s", span, path, member)
	}
	return fmt.Sprintf("%s: neither a type nor a package of %s", span, d.where)
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
	d := parseDecls(root, files, dirs)
	if d.names[name] {
		return true
	}
	for m := range d.methods {
		if strings.HasSuffix(m, "."+name) {
			return true
		}
	}
	return false
}
