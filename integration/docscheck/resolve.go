package docscheck

import (
	"go/ast"
	"unicode"
)

// result is how far a selector chain resolved.
type result int

const (
	unresolved result = iota // an element does not exist
	resolved                 // every element exists
	opaque                   // resolved up to a value whose type cannot be followed
)

// ResolveChain reports whether elems (pkg.Name.Member… when the first
// element is a package name, else Type.Member… or Field.Member…) names
// something that exists in a.
func (a *API) ResolveChain(elems []string) bool {
	if len(elems) < 2 {
		return false
	}
	if ps := a.byName[elems[0]]; len(ps) > 0 {
		for _, p := range ps {
			if a.resolveIn(p, elems[1:]) != unresolved {
				return true
			}
		}
		return false
	}
	for _, p := range a.sortedPackages() {
		if d := p.Decls[elems[0]]; d != nil && d.Kind == "type" {
			if a.members(d, elems[1:], 0) != unresolved {
				return true
			}
		}
	}
	// Config.Retry.MaxRetries is written Retry.MaxRetries: a field of some
	// struct, then a member of the field's type.
	for _, p := range a.sortedPackages() {
		if !isModulePath(p.Path) {
			continue
		}
		for _, d := range p.Decls {
			if d.Kind != "type" {
				continue
			}
			if a.members(d, elems, 0) == resolved {
				return true
			}
		}
	}
	return false
}

// Exists reports whether name is declared anywhere in a: at package level,
// or as a method or field of a type.
func (a *API) Exists(name string) bool {
	if a.tests[name] {
		return true
	}
	for _, p := range a.byPath {
		if p.Decls[name] != nil {
			return true
		}
		for _, d := range p.Decls {
			if d.Kind == "type" && a.members(d, []string{name}, 0) == resolved {
				return true
			}
		}
	}
	return false
}

func isModulePath(p string) bool {
	return p == Module || len(p) > len(Module) && p[:len(Module)+1] == Module+"/"
}

func (a *API) sortedPackages() []*Package {
	ps := make([]*Package, 0, len(a.byPath))
	for _, p := range a.byPath {
		ps = append(ps, p)
	}
	return ps
}

// resolveIn resolves Name.Member… in p.
func (a *API) resolveIn(p *Package, elems []string) result {
	d := p.Decls[elems[0]]
	if d == nil {
		return unresolved
	}
	if len(elems) == 1 {
		return resolved
	}
	switch d.Kind {
	case "type":
		return a.members(d, elems[1:], 0)
	case "var":
		if d.Type == nil {
			return opaque
		}
		return a.exprMembers(d.pkg, d.Imports, d.Type, elems[1:], 0)
	}
	return unresolved
}

// members resolves a chain of members of the type d declares.
func (a *API) members(d *Decl, elems []string, depth int) result {
	if depth > 8 {
		return opaque
	}
	if d.Methods[elems[0]] {
		if len(elems) == 1 {
			return resolved
		}
		return opaque // a method's result is not followed
	}
	return a.exprMembers(d.pkg, d.Imports, d.Type, elems, depth+1)
}

// exprMembers resolves a chain of members of the type expression t, written
// in a file of p with imports.
func (a *API) exprMembers(p *Package, imports map[string]string, t ast.Expr, elems []string, depth int) result {
	if depth > 8 {
		return opaque
	}
	switch t := t.(type) {
	case *ast.StarExpr:
		return a.exprMembers(p, imports, t.X, elems, depth+1)
	case *ast.ParenExpr:
		return a.exprMembers(p, imports, t.X, elems, depth+1)
	case *ast.IndexExpr:
		return a.exprMembers(p, imports, t.X, elems, depth+1)
	case *ast.IndexListExpr:
		return a.exprMembers(p, imports, t.X, elems, depth+1)
	case *ast.Ident:
		d := p.Decls[t.Name]
		if d == nil || d.Kind != "type" {
			if unicode.IsLower(rune(t.Name[0])) {
				return unresolved // a predeclared type: no members
			}
			return opaque
		}
		return a.members(d, elems, depth+1)
	case *ast.SelectorExpr:
		x, ok := t.X.(*ast.Ident)
		if !ok {
			return opaque
		}
		q := a.byPath[imports[x.Name]]
		if q == nil {
			return unresolved // a package not loaded: none of its members is known
		}
		d := q.Decls[t.Sel.Name]
		if d == nil || d.Kind != "type" {
			return unresolved
		}
		return a.members(d, elems, depth+1)
	case *ast.StructType:
		best := unresolved
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 { // embedded: its name is its type's
				if embeddedName(f.Type) == elems[0] {
					if len(elems) == 1 {
						return resolved
					}
					if r := a.exprMembers(p, imports, f.Type, elems[1:], depth+1); r != unresolved {
						return r
					}
				}
				if r := a.exprMembers(p, imports, f.Type, elems, depth+1); r != unresolved {
					best = max(best, r)
				}
				continue
			}
			for _, n := range f.Names {
				if n.Name != elems[0] {
					continue
				}
				if len(elems) == 1 {
					return resolved
				}
				return a.exprMembers(p, imports, f.Type, elems[1:], depth+1)
			}
		}
		return best
	case *ast.InterfaceType:
		best := unresolved
		for _, m := range t.Methods.List {
			if len(m.Names) == 0 {
				if r := a.exprMembers(p, imports, m.Type, elems, depth+1); r != unresolved {
					best = max(best, r)
				}
				continue
			}
			for _, n := range m.Names {
				if n.Name == elems[0] {
					if len(elems) == 1 {
						return resolved
					}
					return opaque
				}
			}
		}
		return best
	}
	return unresolved
}

func embeddedName(t ast.Expr) string {
	switch t := t.(type) {
	case *ast.StarExpr:
		return embeddedName(t.X)
	case *ast.Ident:
		return t.Name
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.IndexExpr:
		return embeddedName(t.X)
	}
	return ""
}
