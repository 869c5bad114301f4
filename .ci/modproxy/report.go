package main

import (
	"fmt"
	"io"
	"path"
	"path/filepath"
	"slices"
	"strings"

	modzip "golang.org/x/mod/zip"
)

// report says what the zip left out of the module's committed files (nested
// modules, and files a module zip may not hold), and how the work tree's
// directory differs from the zip: what CreateFromDir would have taken that a
// tag does not publish, and what the zip has that the directory has not.
func report(w io.Writer, root, sha string, m repoModule, zipped []string) error {
	listing, err := gitBytes(root, "ls-tree", "-r", "-z", "--name-only", sha, "--", m.label())
	if err != nil {
		return err
	}
	inZip := make(map[string]bool)
	for _, f := range zipped {
		inZip[f] = true
	}
	var committed []string
	for _, p := range strings.Split(string(listing), "\x00") {
		if p == "" {
			continue
		}
		if m.dir != "" {
			p = strings.TrimPrefix(p, m.dir+"/")
		}
		committed = append(committed, p)
	}
	nested := make(map[string]bool)
	for _, p := range committed {
		if d, base := path.Split(p); base == "go.mod" && d != "" {
			nested[strings.TrimSuffix(d, "/")] = true
		}
	}
	var nestedOut, otherOut []string
	for _, p := range committed {
		if inZip[p] {
			continue
		}
		if d := outermost(p, nested); d != "" {
			if !slices.Contains(nestedOut, d+"/") {
				nestedOut = append(nestedOut, d+"/")
			}
			continue
		}
		otherOut = append(otherOut, p)
	}
	if len(nestedOut) > 0 {
		fmt.Fprintf(w, "      left out, modules of their own: %s\n", strings.Join(nestedOut, " "))
	}
	if len(otherOut) > 0 {
		fmt.Fprintf(w, "      left out, not allowed in a module zip: %s\n", strings.Join(otherOut, " "))
	}
	if !slices.Contains(committed, "LICENSE") && inZip["LICENSE"] {
		fmt.Fprintf(w, "      LICENSE: the repository root's (the module has none of its own)\n")
	}

	// The work tree's directory, as CreateFromDir would take it. A problem
	// there (an invalid or huge untracked file) is reported, not fatal: the
	// published zip comes from the commit.
	dir := filepath.Join(root, filepath.FromSlash(m.dir))
	cf, checkErr := modzip.CheckDir(dir)
	if checkErr != nil {
		fmt.Fprintf(w, "      note: the work tree's %s would not make a valid zip: %v\n", m.label(), checkErr)
	}
	inDir := make(map[string]bool)
	var extra []string
	for _, p := range cf.Valid {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		inDir[rel] = true
		if !inZip[rel] {
			extra = append(extra, rel)
		}
	}
	var missing []string
	for _, p := range zipped {
		if !inDir[p] && !(p == "LICENSE" && !slices.Contains(committed, "LICENSE")) {
			missing = append(missing, p)
		}
	}
	if len(extra) > 0 {
		fmt.Fprintf(w, "      not published, though CreateFromDir would take them from the work tree: %s\n", abbreviate(extra, 8))
	}
	if len(missing) > 0 {
		fmt.Fprintf(w, "      published, though missing from the work tree: %s\n", abbreviate(missing, 8))
	}
	return nil
}

// outermost is the outermost of p's parent directories that is in dirs, or "".
func outermost(p string, dirs map[string]bool) string {
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && dirs[p[:i]] {
			return p[:i]
		}
	}
	return ""
}

// abbreviate joins the first n names, and says how many more there are.
func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, " ")
	}
	return fmt.Sprintf("%s (and %d more)", strings.Join(names[:n], " "), len(names)-n)
}
