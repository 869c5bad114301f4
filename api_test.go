package pgtx

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
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
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var names []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, exportedNames(f)...)
	}
	if len(names) == 0 {
		t.Fatal("found no exported names: the parse missed the package")
	}
	if len(names) > maxRootNames {
		sort.Strings(names)
		t.Errorf("the root package exports %d names, want at most %d: %s", len(names), maxRootNames, strings.Join(names, " "))
	}
}

// exportedNames returns the exported top-level names f declares.
func exportedNames(f *ast.File) []string {
	var names []string
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
	return names
}
