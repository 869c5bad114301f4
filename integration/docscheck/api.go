package docscheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Module is the import path of pgtx's root module.
const Module = "github.com/pgtx-go/pgtx"

// A Package is the exported surface of one Go package, read from its source.
type Package struct {
	Path  string           // import path
	Name  string           // package name
	Dir   string           // directory relative to the repository root, for pgtx's own
	Decls map[string]*Decl // package-level declarations by name
}

// A Decl is a package-level declaration.
type Decl struct {
	Kind    string // "type", "func", "var" or "const"
	Type    ast.Expr
	Imports map[string]string // the declaring file's imports: name → path
	Methods map[string]bool   // for a type: methods declared on it or its pointer
	pkg     *Package
}

// An API is a set of packages, found by import path and by name.
type API struct {
	byPath map[string]*Package
	byName map[string][]*Package
	// typesOnly are packages whose types resolve Type.Member spans but whose
	// name does not make a span's first element a package (example code).
	typesOnly map[string]bool
	// tests are the names of the test, benchmark, example and fuzz
	// functions of the repository's _test.go files.
	tests map[string]bool
}

// NewAPI returns an empty API.
func NewAPI() *API {
	return &API{byPath: map[string]*Package{}, byName: map[string][]*Package{}, typesOnly: map[string]bool{}, tests: map[string]bool{}}
}

// Add adds p; typesOnly keeps its name from counting as a package name.
func (a *API) Add(p *Package, typesOnly bool) {
	if _, ok := a.byPath[p.Path]; ok {
		return
	}
	a.byPath[p.Path] = p
	if typesOnly {
		a.typesOnly[p.Path] = true
		return
	}
	a.byName[p.Name] = append(a.byName[p.Name], p)
}

// Packages returns the packages named name.
func (a *API) Packages(name string) []*Package { return a.byName[name] }

// HasPackageDir reports whether a package of pgtx's lives in dir.
func (a *API) HasPackageDir(dir string) bool {
	for _, p := range a.byPath {
		if p.Dir == dir && !a.typesOnly[p.Path] {
			return true
		}
	}
	return false
}

// ParseFiles makes a Package from the named sources (name → content).
func ParseFiles(importPath, dir string, files map[string][]byte) (*Package, error) {
	fset := token.NewFileSet()
	p := &Package{Path: importPath, Dir: dir, Decls: map[string]*Decl{}}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	type method struct{ recv, name string }
	var methods []method
	for _, n := range names {
		f, err := parser.ParseFile(fset, n, files[n], parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", importPath, err)
		}
		if p.Name == "" || p.Name == "main" {
			p.Name = f.Name.Name
		}
		imports := map[string]string{}
		for _, im := range f.Imports {
			ip, _ := strconv.Unquote(im.Path.Value)
			name := path.Base(ip)
			if strings.HasPrefix(name, "v") && len(name) > 1 && strings.Trim(name[1:], "0123456789") == "" {
				name = path.Base(path.Dir(ip)) // github.com/jackc/pgx/v5 is pgx
			}
			if im.Name != nil {
				name = im.Name.Name
			}
			imports[name] = ip
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					p.Decls[d.Name.Name] = &Decl{Kind: "func", Imports: imports, pkg: p}
					continue
				}
				methods = append(methods, method{recvName(d.Recv.List[0].Type), d.Name.Name})
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						p.Decls[s.Name.Name] = &Decl{Kind: "type", Type: s.Type, Imports: imports, Methods: map[string]bool{}, pkg: p}
					case *ast.ValueSpec:
						kind := "var"
						if d.Tok == token.CONST {
							kind = "const"
						}
						for _, id := range s.Names {
							p.Decls[id.Name] = &Decl{Kind: kind, Type: s.Type, Imports: imports, pkg: p}
						}
					}
				}
			}
		}
	}
	for _, m := range methods {
		if d := p.Decls[m.recv]; d != nil && d.Kind == "type" {
			d.Methods[m.name] = true
		}
	}
	return p, nil
}

// recvName is the type name of a method's receiver.
func recvName(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.ParenExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// isSource reports whether a file name is a package's non-test Go source.
func isSource(name string) bool {
	return strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")
}

// skipDir reports whether dir (relative to the repository root) holds no
// package a user imports: internal packages, test data, and the modules
// never released.
func skipDir(dir string) bool {
	if dir == "." {
		return false
	}
	for _, el := range strings.Split(dir, "/") {
		if el == "internal" || el == "testdata" || strings.HasPrefix(el, ".") || strings.HasPrefix(el, "_") {
			return true
		}
	}
	first := strings.Split(dir, "/")[0]
	return first == "examples" || first == "integration" || first == "bench"
}

// LoadRepo adds pgtx's importable packages under root (the repository's
// directory), and the internal and example packages as types only.
func LoadRepo(a *API, root string) error {
	files := map[string]map[string][]byte{} // dir → name → content
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		dir := path.Dir(rel)
		if strings.HasSuffix(d.Name(), "_test.go") {
			return addTests(a, p)
		}
		if !isSource(d.Name()) || skipDir(dir) && !typesOnly(dir) && dir != namedExample {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if files[dir] == nil {
			files[dir] = map[string][]byte{}
		}
		files[dir][d.Name()] = b
		return nil
	})
	if err != nil {
		return err
	}
	return addDirs(a, files)
}

// namedExample is the example package the documents name by its package
// name: the client ent generates (`ent.NewClient`, `*ent.Tx`).
const namedExample = "examples/orm/ent/ent"

// typesOnly reports whether dir holds code whose types a document may name
// but whose package name is no package a user imports: internal packages
// and the examples.
func typesOnly(dir string) bool {
	if dir == namedExample {
		return false
	}
	return strings.HasPrefix(dir, "examples/") || strings.Contains("/"+dir+"/", "/internal/")
}

func addDirs(a *API, files map[string]map[string][]byte) error {
	dirs := make([]string, 0, len(files))
	for d := range files {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		ip := Module
		if dir != "." {
			ip += "/" + dir
		}
		p, err := ParseFiles(ip, dir, files[dir])
		if err != nil {
			return err
		}
		a.Add(p, typesOnly(dir))
	}
	return nil
}

// LoadCommit adds pgtx's importable packages as they were at commit, read
// with git from the repository at root.
func LoadCommit(a *API, root, commit string) error {
	out, err := git(root, "ls-tree", "-r", "--name-only", commit)
	if err != nil {
		return err
	}
	files := map[string]map[string][]byte{}
	for _, name := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		dir := path.Dir(name)
		if !isSource(path.Base(name)) || (dir != "." && skipDir(dir)) {
			continue
		}
		b, err := git(root, "show", commit+":"+name)
		if err != nil {
			return err
		}
		if files[dir] == nil {
			files[dir] = map[string][]byte{}
		}
		files[dir][path.Base(name)] = b
	}
	if len(files) == 0 {
		return fmt.Errorf("docscheck: no Go package at commit %s", commit)
	}
	return addDirs(a, files)
}

// LoadExternal adds the packages of importPaths, located with `go list`
// from dir (a directory of a module that requires them).
func LoadExternal(a *API, dir string, importPaths ...string) error {
	args := append([]string{"list", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \" \"}}"}, importPaths...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go list: %v: %s", err, stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return fmt.Errorf("go list: unexpected line %q", line)
		}
		files := map[string][]byte{}
		for _, n := range strings.Fields(f[2]) {
			b, err := os.ReadFile(filepath.Join(f[1], n))
			if err != nil {
				return err
			}
			files[n] = b
		}
		p, err := ParseFiles(f[0], "", files)
		if err != nil {
			return err
		}
		a.Add(p, false)
	}
	return nil
}

func git(root string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// addTests records the top-level functions of the test file at p.
func addTests(a *API, p string) error {
	f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
	if err != nil {
		return err
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
			a.tests[fd.Name.Name] = true
		}
	}
	return nil
}
