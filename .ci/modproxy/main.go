// Command modproxy publishes modules of this repository, as their tags at one
// commit would publish them, into a directory laid out as a Go module proxy
// (GOPROXY=file:///dir): for each module <path>/@v/<version>.info, .mod and
// .zip, and <path>/@v/list. .ci/release runs it, then builds a consumer
// module against that directory.
//
// The version is the one the published modules require of each other (and
// the -requirer modules require of them), read from their go.mod files at the
// commit: the release writes it there, and nowhere else. Every such require
// must name the same version; one that does not is an error, as it would be a
// release whose modules do not fit together.
//
// The zips are made from the commit, not from the work tree, with
// golang.org/x/mod/zip's CreateFromVCS: what the go command makes of a tag.
// Only committed files go in (nothing untracked or ignored: build outputs,
// bench results), nested modules stay out, and a module in a subdirectory
// without a LICENSE of its own gets the repository root's. CreateFromDir
// would take the work tree as it is, and it skips only .git directories, not
// the .git file of a git worktree or submodule. What the work tree's
// directory would add, or lacks, is reported beside each zip.
//
// CreateFromVCS wants a repository whose .git is a directory under its work
// tree, which a git worktree is not; the zips are therefore made from a
// throwaway clone that shares the repository's objects (git clone --shared),
// removed at exit.
//
// Usage:
//
//	modproxy -out DIR [-repo DIR] [-rev REV] [-sum FILE] [-requirer DIR]... MODULE_DIR...
package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

// repoModule is one module of the repository, as it is at the commit.
type repoModule struct {
	dir   string // slash-separated, relative to the repository root; "" for the root
	path  string // the module path, from its go.mod
	gomod []byte // its go.mod, as committed
	file  *modfile.File
}

// label names the module's directory for messages.
func (m repoModule) label() string {
	if m.dir == "" {
		return "."
	}
	return m.dir
}

func run(args []string, stdout io.Writer) error {
	flags := flag.NewFlagSet("modproxy", flag.ContinueOnError)
	repo := flags.String("repo", ".", "the repository's root (its work tree)")
	rev := flags.String("rev", "HEAD", "the commit to publish, as the tags would")
	out := flags.String("out", "", "the proxy directory to write (required)")
	sumFile := flags.String("sum", "", "write the go.sum lines of the published modules to this file")
	var requirerDirs []string
	flags.Func("requirer", "a module that is not published but must require the published ones at the version (repeatable)",
		func(dir string) error { requirerDirs = append(requirerDirs, dir); return nil })
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *out == "" || flags.NArg() == 0 {
		return errors.New("-out and at least one module directory are required")
	}

	root, err := filepath.Abs(*repo)
	if err != nil {
		return err
	}
	sha, err := git(root, "rev-parse", "--verify", *rev+"^{commit}")
	if err != nil {
		return err
	}
	when, err := git(root, "show", "-s", "--format=%cI", sha)
	if err != nil {
		return err
	}
	// The .info file's Time is the commit's, as for a tag.
	commitTime, err := time.Parse(time.RFC3339, when)
	if err != nil {
		return fmt.Errorf("commit time of %s: %w", sha, err)
	}
	commitTime = commitTime.UTC()

	published, err := readModules(root, sha, flags.Args())
	if err != nil {
		return err
	}
	requirers, err := readModules(root, sha, requirerDirs)
	if err != nil {
		return err
	}
	version, err := releaseVersion(published, requirers)
	if err != nil {
		return err
	}

	proxyDir, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "modproxy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	clone := filepath.Join(tmp, "repo")
	if _, err := git(tmp, "clone", "--quiet", "--shared", "--no-checkout", root, clone); err != nil {
		return err
	}

	fmt.Fprintf(stdout, "modproxy: %s of %d modules, from commit %s (%s), into %s\n",
		version, len(published), sha[:12], commitTime.Format(time.RFC3339), proxyDir)
	if changed, err := git(root, "diff", "--name-only", sha, "--"); err != nil {
		return err
	} else if changed != "" {
		fmt.Fprintf(stdout, "  note: changed in the work tree, not published: %s\n",
			abbreviate(strings.Split(changed, "\n"), 5))
	}

	var sums []string
	for _, m := range published {
		p, err := publish(proxyDir, clone, sha, m, version, commitTime)
		if err != nil {
			return err
		}
		sums = append(sums,
			fmt.Sprintf("%s %s %s", m.path, version, p.sum),
			fmt.Sprintf("%s %s/go.mod %s", m.path, version, p.modSum))
		fmt.Fprintf(stdout, "  %s@%s  (%s)  %d files, zip %d bytes, %s, go.mod %s\n",
			m.path, version, m.label(), len(p.files), p.size, p.sum, p.modSum)
		if err := report(stdout, root, sha, m, p.files); err != nil {
			return err
		}
	}
	if *sumFile != "" {
		slices.Sort(sums)
		if err := os.WriteFile(*sumFile, []byte(strings.Join(sums, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// publication is what publish wrote for one module.
type publication struct {
	files  []string // the zip's files, relative to the module's root
	size   int64    // the zip's size in bytes
	sum    string   // the zip's hash, as go.sum has it
	modSum string   // the go.mod's hash, as go.sum has it
}

// publish writes the module's .info, .mod and .zip at version into the proxy
// directory, and adds the version to its list.
func publish(proxyDir, clone, sha string, m repoModule, version string, commitTime time.Time) (publication, error) {
	mv := module.Version{Path: m.path, Version: version}
	escPath, err := module.EscapePath(m.path)
	if err != nil {
		return publication{}, err
	}
	escVersion, err := module.EscapeVersion(version)
	if err != nil {
		return publication{}, err
	}
	dir := filepath.Join(proxyDir, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return publication{}, err
	}
	base := filepath.Join(dir, escVersion)

	zipPath := base + ".zip"
	if err := writeZip(zipPath, mv, clone, sha, m.dir); err != nil {
		return publication{}, err
	}
	// The go command checks a zip the same way before it extracts one.
	if _, err := modzip.CheckZip(mv, zipPath); err != nil {
		return publication{}, fmt.Errorf("%s: %w", zipPath, err)
	}
	files, size, err := zipFiles(zipPath, mv)
	if err != nil {
		return publication{}, err
	}
	if !slices.Contains(files, "go.mod") {
		return publication{}, fmt.Errorf("%s: no go.mod in the zip", zipPath)
	}
	sum, err := dirhash.HashZip(zipPath, dirhash.Hash1)
	if err != nil {
		return publication{}, err
	}
	// A go.mod's hash in go.sum is Hash1 over the one file named "go.mod".
	modSum, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(m.gomod)), nil
	})
	if err != nil {
		return publication{}, err
	}

	if err := os.WriteFile(base+".mod", m.gomod, 0o644); err != nil {
		return publication{}, err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, commitTime})
	if err != nil {
		return publication{}, err
	}
	if err := os.WriteFile(base+".info", info, 0o644); err != nil {
		return publication{}, err
	}
	if err := addToList(filepath.Join(dir, "list"), version); err != nil {
		return publication{}, err
	}
	return publication{files: files, size: size, sum: sum, modSum: modSum}, nil
}

// writeZip makes the module's zip from the commit, as the go command makes it
// from a tag, through a temporary file, so that a failure leaves no partial
// zip for a consumer to find.
func writeZip(zipPath string, mv module.Version, clone, sha, subdir string) error {
	f, err := os.CreateTemp(filepath.Dir(zipPath), ".zip-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := modzip.CreateFromVCS(f, mv, clone, sha, subdir); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), zipPath)
}

// zipFiles lists the zip's files relative to the module's root (the zip
// holds them under path@version/), and its size.
func zipFiles(zipPath string, mv module.Version) ([]string, int64, error) {
	r, err := zip.OpenReader(zipPath)
	if err != nil {
		return nil, 0, err
	}
	defer r.Close()
	prefix := mv.Path + "@" + mv.Version + "/"
	var files []string
	for _, f := range r.File {
		name, ok := strings.CutPrefix(f.Name, prefix)
		if !ok {
			return nil, 0, fmt.Errorf("%s: %s is outside %s", zipPath, f.Name, prefix)
		}
		files = append(files, name)
	}
	st, err := os.Stat(zipPath)
	if err != nil {
		return nil, 0, err
	}
	slices.Sort(files)
	return files, st.Size(), nil
}

// addToList adds version to the @v/list file, one version a line, in
// semantic version order.
func addToList(listPath, version string) error {
	data, err := os.ReadFile(listPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(data))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	slices.SortFunc(versions, semver.Compare)
	return os.WriteFile(listPath, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// git runs git in dir and returns its output without the final newline.
func git(dir string, args ...string) (string, error) {
	out, err := gitBytes(dir, args...)
	return strings.TrimRight(string(out), "\n"), err
}

func gitBytes(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
