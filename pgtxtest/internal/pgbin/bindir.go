// Package pgbin finds the PostgreSQL server binaries the kit runs.
package pgbin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// binFinder locates the PostgreSQL server binaries. Its fields are seams for tests.
type binFinder struct {
	getenv   func(string) string
	pgConfig func() (string, error) // the output of pg_config --bindir
	glob     func(string) ([]string, error)
	lookPath func(string) (string, error)
	isServer func(dir string) bool // dir holds initdb and postgres
}

var system = binFinder{
	getenv: os.Getenv,
	pgConfig: func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), ToolTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, "pg_config", "--bindir").Output()
		return strings.TrimSpace(string(out)), err
	},
	glob:     filepath.Glob,
	lookPath: exec.LookPath,
	isServer: func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			st, err := os.Stat(filepath.Join(dir, name))
			if err != nil || st.IsDir() || st.Mode().Perm()&0o111 == 0 {
				return false
			}
		}
		return true
	},
}

// find returns the directory of the server binaries: PGTX_TEST_PG_BINDIR if set,
// else pg_config --bindir, else the highest /usr/lib/postgresql/*/bin, else the
// directory of initdb on PATH.
func (f binFinder) find() (string, error) {
	if dir := f.getenv("PGTX_TEST_PG_BINDIR"); dir != "" {
		if !f.isServer(dir) {
			return "", fmt.Errorf("pgtxtest: PGTX_TEST_PG_BINDIR=%s holds no initdb and postgres", dir)
		}
		return dir, nil
	}
	if dir, err := f.pgConfig(); err == nil && dir != "" && f.isServer(dir) {
		return dir, nil
	}
	dirs, _ := f.glob("/usr/lib/postgresql/*/bin")
	sort.SliceStable(dirs, func(i, j int) bool {
		return VersionLess(filepath.Base(filepath.Dir(dirs[j])), filepath.Base(filepath.Dir(dirs[i])))
	})
	for _, dir := range dirs {
		if f.isServer(dir) {
			return dir, nil
		}
	}
	if p, err := f.lookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if dir := filepath.Dir(p); f.isServer(dir) {
			return dir, nil
		}
	}
	return "", errors.New("pgtxtest: no PostgreSQL server binaries (initdb, postgres) found via pg_config, /usr/lib/postgresql/*/bin or PATH")
}

// VersionLess orders version strings such as "9.6", "10" and "15" numerically.
func VersionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, errX := strconv.Atoi(as[i])
		y, errY := strconv.Atoi(bs[i])
		if errX != nil || errY != nil {
			if as[i] != bs[i] {
				return as[i] < bs[i]
			}
			continue
		}
		if x != y {
			return x < y
		}
	}
	return len(as) < len(bs)
}

// ToolTimeout bounds a run of pg_config or postgres --version.
const ToolTimeout = 10 * time.Second

var found struct {
	once   sync.Once
	bindir string
	err    error
}

// Find returns the directory of this machine's server binaries, looking once per
// test binary: PGTX_TEST_PG_BINDIR if set, else pg_config --bindir, else the highest
// /usr/lib/postgresql/*/bin, else the directory of initdb on PATH.
func Find() (string, error) {
	found.once.Do(func() { found.bindir, found.err = system.find() })
	return found.bindir, found.err
}

// IsServer reports whether dir holds the server binaries initdb and postgres.
func IsServer(dir string) bool { return system.isServer(dir) }
