package docscheck

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// A Problem is a name a document gives that does not exist.
type Problem struct {
	File string
	Line int
	Span string // the code span
	Name string // the name in it that did not resolve
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: `%s`: %s does not exist", p.File, p.Line, p.Span, p.Name)
}

// A Checker resolves the names of documents' code spans.
type Checker struct {
	Current *API
	// Base is the API of the last release. A name in a "Breaking changes"
	// item that says the name was removed or renamed may resolve there
	// instead of in Current. Nil: no name may.
	Base *API
}

// removal matches the words with which a breaking change names what it
// removes or replaces.
var removal = regexp.MustCompile(`(?i)\bremoved\b|\bremoves\b|\brenamed\b|→|\bwas\b|\bbecomes\b|\binstead of\b|\bused to\b|\bno longer\b`)

// chain matches a selector chain: ident(.ident)+.
var chain = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+`)

// ident matches a whole span that is one Go identifier, maybe with a call's
// parentheses or a pointer's star.
var ident = regexp.MustCompile(`^[*&]?([A-Za-z_][A-Za-z0-9_]*)(\(.*\))?$`)

// fileExt are the extensions that make a two-element chain a file name.
var fileExt = map[string]bool{
	"go": true, "md": true, "mod": true, "sum": true, "work": true, "svg": true, "json": true,
	"yaml": true, "yml": true, "sh": true, "sql": true, "conf": true, "ini": true, "txt": true,
	"toml": true, "html": true, "csv": true, "log": true, "out": true, "pem": true, "key": true,
}

// shell are first words that make a span a command, not Go.
var shell = map[string]bool{
	"go": true, "cd": true, "bash": true, "git": true, "apt-get": true, "psql": true, "docker": true,
	"make": true, "curl": true, "sudo": true, "pg_ctl": true, "pgbench": true, "gofmt": true,
}

var importPath = regexp.MustCompile(`^` + regexp.QuoteMeta(Module) + `(/[A-Za-z0-9_./-]+)?(@\S+)?$`)

// Check returns the problems of doc, whose name is file. breaking reports
// whether a span is in a section whose removed names resolve against Base.
func (c *Checker) Check(file, doc string, lineOffset int, breaking func(Span) bool) []Problem {
	var out []Problem
	for _, s := range Spans(doc) {
		lenient := c.Base != nil && breaking != nil && breaking(s) && removal.MatchString(s.Item)
		for _, name := range c.unresolved(s.Text, lenient) {
			out = append(out, Problem{File: file, Line: s.Line + lineOffset, Span: s.Text, Name: name})
		}
	}
	return out
}

// unresolved returns the names of span that do not resolve.
func (c *Checker) unresolved(span string, lenient bool) []string {
	if span == "" {
		return nil
	}
	if f := strings.Fields(span); shell[f[0]] || strings.Contains(f[0], "=") && len(f) > 1 {
		return nil
	}
	apis := []*API{c.Current}
	if lenient {
		apis = append(apis, c.Base)
	}
	if m := importPath.FindStringSubmatch(span); m != nil {
		dir := strings.TrimPrefix(m[1], "/")
		if dir == "" {
			dir = "."
		}
		for _, a := range apis {
			if a.HasPackageDir(dir) {
				return nil
			}
		}
		return []string{span}
	}
	if m := ident.FindStringSubmatch(span); m != nil && !strings.Contains(span, ".") {
		return c.single(m[1], apis)
	}
	var bad []string
	for _, loc := range chain.FindAllStringIndex(span, -1) {
		if loc[0] > 0 && strings.ContainsRune("./)]-@$:", rune(span[loc[0]-1])) ||
			loc[0] > 0 && (unicode.IsLetter(rune(span[loc[0]-1])) || unicode.IsDigit(rune(span[loc[0]-1]))) ||
			loc[1] < len(span) && strings.ContainsRune("/-@", rune(span[loc[1]])) {
			continue // part of a path, a URL, an expression or a number
		}
		elems := strings.Split(span[loc[0]:loc[1]], ".")
		if !c.mustResolve(elems, apis) {
			continue
		}
		names := [][]string{elems}
		// A composite literal's keys are fields of its type:
		// pgtx.Options{ReadOnly: true}.
		if loc[1] < len(span) && span[loc[1]] == '{' {
			if end := strings.IndexByte(span[loc[1]:], '}'); end > 0 {
				for _, k := range literalKey.FindAllStringSubmatch(span[loc[1]:loc[1]+end], -1) {
					names = append(names, append(append([]string{}, elems...), k[1]))
				}
			}
		}
		for _, n := range names {
			ok := false
			for _, a := range apis {
				ok = ok || a.ResolveChain(n)
			}
			if !ok {
				bad = append(bad, strings.Join(n, "."))
			}
		}
	}
	return bad
}

// literalKey matches a key of a composite literal's element list.
var literalKey = regexp.MustCompile(`(?:^\{|,)\s*([A-Z][A-Za-z0-9_]*)\s*:`)

// mustResolve reports whether a chain is meant as Go: it starts with a
// package's name and then an exported name, or with an exported name
// (Type.Method, Field.Member). Lower-case chains are variables, SQL,
// metric and attribute names; a two-element chain ending in a file
// extension is a file.
func (c *Checker) mustResolve(elems []string, apis []*API) bool {
	if len(elems) == 2 && fileExt[strings.ToLower(elems[1])] {
		return false
	}
	for _, a := range apis {
		if len(a.Packages(elems[0])) > 0 {
			return isExported(elems[1])
		}
	}
	return isExported(elems[0]) && !isAllCaps(elems[0])
}

// single checks a span that is one identifier: a package name that only the
// last release had, or a CamelCase name declared nowhere.
func (c *Checker) single(name string, apis []*API) []string {
	for _, a := range apis {
		if len(a.Packages(name)) > 0 {
			return nil
		}
	}
	if c.Base != nil && len(c.Base.Packages(name)) > 0 {
		return []string{name} // a package the last release had and this one has not
	}
	if !isExported(name) || isAllCaps(name) || !hasLower(name) || Foreign[name] != "" {
		return nil
	}
	for _, a := range apis {
		if a.Exists(name) {
			return nil
		}
	}
	return []string{name}
}

func isExported(s string) bool { return s != "" && unicode.IsUpper(rune(s[0])) }

func hasLower(s string) bool { return strings.IndexFunc(s, unicode.IsLower) >= 0 }

func isAllCaps(s string) bool {
	return strings.IndexFunc(s, unicode.IsLower) < 0
}
