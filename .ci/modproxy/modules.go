package main

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
)

// readModules reads the go.mod of each directory as committed at sha.
// Directories are relative to root, or absolute within it.
func readModules(root, sha string, dirs []string) ([]repoModule, error) {
	var mods []repoModule
	for _, d := range dirs {
		if filepath.IsAbs(d) {
			rel, err := filepath.Rel(root, d)
			if err != nil {
				return nil, err
			}
			d = rel
		}
		d = filepath.ToSlash(filepath.Clean(d))
		if d == ".." || strings.HasPrefix(d, "../") {
			return nil, fmt.Errorf("%s is outside the repository %s", d, root)
		}
		if d == "." {
			d = ""
		}
		name := path.Join(d, "go.mod")
		data, err := gitBytes(root, "cat-file", "blob", sha+":"+name)
		if err != nil {
			return nil, fmt.Errorf("%s at %s: %w", name, sha[:12], err)
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			return nil, err
		}
		if f.Module == nil {
			return nil, fmt.Errorf("%s has no module line", name)
		}
		mods = append(mods, repoModule{dir: d, path: f.Module.Mod.Path, gomod: data, file: f})
	}
	return mods, nil
}

// releaseVersion is the version the modules require of the published ones:
// every such require must name it, it must be a release's version (canonical
// semver, not a pseudo-version), and there must be at least one, or nothing
// says what the release is.
func releaseVersion(published, requirers []repoModule) (string, error) {
	isPublished := make(map[string]bool)
	for _, m := range published {
		if isPublished[m.path] {
			return "", fmt.Errorf("module %s is given twice", m.path)
		}
		isPublished[m.path] = true
	}
	var uses []string
	seen := make(map[string]bool)
	var versions []string
	for _, m := range slices.Concat(published, requirers) {
		for _, r := range m.file.Require {
			if !isPublished[r.Mod.Path] || r.Mod.Path == m.path {
				continue
			}
			uses = append(uses, fmt.Sprintf("%s/go.mod: %s %s", m.label(), r.Mod.Path, r.Mod.Version))
			if !seen[r.Mod.Version] {
				seen[r.Mod.Version] = true
				versions = append(versions, r.Mod.Version)
			}
		}
	}
	switch len(versions) {
	case 0:
		return "", errors.New("no module requires a published one: no go.mod says what version is released")
	case 1:
	default:
		return "", fmt.Errorf("the modules require different versions of the published ones (%s):\n  %s",
			strings.Join(versions, ", "), strings.Join(uses, "\n  "))
	}
	v := versions[0]
	if module.CanonicalVersion(v) != v || module.IsPseudoVersion(v) {
		return "", fmt.Errorf("%s is not a release's version (a canonical semantic version, not a pseudo-version):\n  %s",
			v, strings.Join(uses, "\n  "))
	}
	for _, m := range published {
		if err := module.Check(m.path, v); err != nil {
			return "", err
		}
	}
	return v, nil
}
