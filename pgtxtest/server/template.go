package server

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/pgbin"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

var versionNumber = regexp.MustCompile(`\d+(\.\d+)*`)

// ensureTemplate returns the directory of an initdb'ed data directory for bindir's
// version, building it first if no test binary has yet. Builders are serialized with
// a lock file; a template is built in a temporary directory and renamed into place,
// so a template that exists is complete.
func ensureTemplate(ctx context.Context, bindir string, cred *syscall.Credential) (string, error) {
	version, err := serverVersion(ctx, bindir)
	if err != nil {
		return "", err
	}
	h := fnv.New32a()
	fmt.Fprintf(h, "%s\x00%s\x00%s", templateFormat, bindir, version)
	number := "unknown"
	if m := versionNumber.FindString(version); m != "" {
		number = m
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("pgtx-pgtest-template-%s-%08x-%d", number, h.Sum32(), os.Geteuid()))

	unlock, err := lockFile(ctx, dir+".lock", lockTimeout)
	if err != nil {
		return "", err
	}
	defer unlock()

	if ok, err := templateReady(dir, cred); err != nil || ok {
		return dir, err
	}
	build, err := os.MkdirTemp(os.TempDir(), filepath.Base(dir)+"-build-")
	if err != nil {
		return "", fmt.Errorf("pgtxtest: make template directory: %w", err)
	}
	if err := initTemplate(ctx, bindir, build, cred); err != nil {
		return "", errors.Join(err, os.RemoveAll(build))
	}
	if err := os.Rename(build, dir); err != nil {
		return "", errors.Join(fmt.Errorf("pgtxtest: install template: %w", err), os.RemoveAll(build))
	}
	return dir, nil
}

// templateReady reports whether dir holds a template; it removes a broken one.
func templateReady(dir string, cred *syscall.Credential) (bool, error) {
	st, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pgtxtest: template %s: %w", dir, err)
	}
	owner := uint32(os.Geteuid())
	if cred != nil {
		owner = cred.Uid
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !st.IsDir() || !ok || sys.Uid != owner {
		return false, fmt.Errorf("pgtxtest: %s is not a template directory owned by uid %d; remove it", dir, owner)
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err == nil {
		return true, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("pgtxtest: remove broken template: %w", err)
	}
	return false, nil
}

func initTemplate(ctx context.Context, bindir, dir string, cred *syscall.Credential) error {
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("pgtxtest: hand template directory to the postgres user: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, initdbTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bindir, "initdb"),
		"-D", dir, "-U", proc.Superuser, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	cmd.Dir = dir
	cmd.Env = proc.Env()
	cmd.SysProcAttr = proc.SysProcAttr(cred)
	cmd.WaitDelay = proc.KillGrace
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtxtest: initdb: %w\n%s", err, out)
	}
	return nil
}

// lockFile takes an exclusive flock on path, polling until timeout. The returned
// function releases it.
func lockFile(ctx context.Context, path string, timeout time.Duration) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgtxtest: open lock file: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("pgtxtest: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("pgtxtest: lock %s: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}

// serverVersion returns the output of postgres --version.
func serverVersion(ctx context.Context, bindir string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, pgbin.ToolTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(bindir, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("pgtxtest: %s --version: %w", filepath.Join(bindir, "postgres"), err)
	}
	return strings.TrimSpace(string(out)), nil
}
