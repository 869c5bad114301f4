package pgtx

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"sort"
	"strings"
	"testing"
)

// maxRootNames is the v1 bound on the root package's exported top-level
// names (types, functions, variables and constants, each counted).
const maxRootNames = 60

// TestRootAPISize: the root package stays the transaction path, with at
// most maxRootNames exported names; leaf features belong in sub-packages.
func TestRootAPISize(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range pkgs["pgtx"].Files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("found no exported names: the parse missed the package")
	}
	if len(names) > maxRootNames {
		sort.Strings(names)
		t.Errorf("the root package exports %d names, want at most %d: %s", len(names), maxRootNames, strings.Join(names, " "))
	}
}
