package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

// Bounds of the local cluster's steps.
const (
	readyTimeout    = 30 * time.Second // from starting postgres to accepting connections
	initdbTimeout   = 2 * time.Minute  // initdb of the template
	lockTimeout     = 3 * time.Minute  // waiting for another test binary building the template
	copyTimeout     = time.Minute      // cp -a of the template
	templateFormat  = "v1"             // bump when the initdb flags change
	defaultMaxConns = "600"            // room for the benchmark's 128-worker pools side by side
)

// localCluster is a PostgreSQL cluster run from the local binaries in a directory of
// its own: root/data (a copy of the template), root/sock and root/server.log.
type localCluster struct {
	bindir   string
	root     string
	port     int
	settings map[string]string
	cred     *syscall.Credential // nil when not root

	proc *proc.Process // nil while down
}

func (c *localCluster) dataDir() string { return filepath.Join(c.root, "data") }
func (c *localCluster) sockDir() string { return filepath.Join(c.root, "sock") }
func (c *localCluster) logPath() string { return filepath.Join(c.root, "server.log") }

func (c *localCluster) dsn() *url.URL {
	return &url.URL{
		Scheme:   "postgres",
		User:     url.User(proc.Superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/postgres",
		RawQuery: "sslmode=disable",
	}
}

// startLocal makes a new cluster from the binaries in bindir and starts it. settings
// are extra server settings, applied after (and so overriding) the harness's own. The
// cluster is a copy of the template, or, with ownSystem, an initdb of its own.
func startLocal(ctx context.Context, bindir string, settings map[string]string, ownSystem bool) (*Server, error) {
	if err := proc.ValidateSettings(settings); err != nil {
		return nil, err
	}
	cred, err := proc.Credential()
	if err != nil {
		return nil, err
	}
	tmpl, err := ensureTemplate(ctx, bindir, cred)
	if err != nil {
		return nil, err
	}
	root, err := newClusterRoot()
	if err != nil {
		return nil, err
	}
	c := &localCluster{bindir: bindir, root: root, settings: settings, cred: cred}
	prepare := c.prepare
	if ownSystem {
		prepare = c.initdb
	}
	if err := prepare(ctx, tmpl); err != nil {
		return nil, errors.Join(err, os.RemoveAll(root))
	}
	if err := c.startOnFreePort(ctx); err != nil {
		return nil, errors.Join(err, os.RemoveAll(root))
	}
	s := newServer(KindLocal, c.dsn())
	s.local = c
	return s, nil
}

// newClusterRoot makes the directory of a new cluster in the base directory, under a
// name that sweepStaleClusters recognizes once this binary is gone.
func newClusterRoot() (string, error) {
	base := proc.BaseDir()
	sweepStaleClusters(base)
	root, err := os.MkdirTemp(base, fmt.Sprintf("pgtx-pgtest-cluster-%d-", os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("pgtxtest: make cluster directory: %w", err)
	}
	return root, nil
}

// startOnFreePort starts the server on a free port, trying another one when someone
// else takes the port between choosing and listening.
func (c *localCluster) startOnFreePort(ctx context.Context) error {
	var err error
	for range proc.StartAttempts {
		if c.port, err = proc.FreePort(); err != nil {
			return err
		}
		if err = c.start(ctx); !errors.Is(err, proc.ErrPortTaken) {
			return err
		}
	}
	return err
}

// prepare copies the template into the cluster directory and hands it to the server's
// user.
func (c *localCluster) prepare(ctx context.Context, tmpl string) error {
	if err := c.makeDirs(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, copyTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "cp", "-a", tmpl, c.dataDir()).CombinedOutput(); err != nil {
		return fmt.Errorf("pgtxtest: copy template %s: %w: %s", tmpl, err, bytes.TrimSpace(out))
	}
	return nil
}

// initdb makes the cluster's data directory with initdb, as the template is
// made: a system of its own.
func (c *localCluster) initdb(ctx context.Context, _ string) error {
	if err := c.makeDirs(); err != nil {
		return err
	}
	if err := os.Mkdir(c.dataDir(), 0o700); err != nil {
		return fmt.Errorf("pgtxtest: make data directory: %w", err)
	}
	return initTemplate(ctx, c.bindir, c.dataDir(), c.cred)
}

// makeDirs makes the socket directory and hands it and the cluster directory to the
// server's user, who must be able to create the data directory and the log there.
func (c *localCluster) makeDirs() error {
	if err := os.Mkdir(c.sockDir(), 0o700); err != nil {
		return fmt.Errorf("pgtxtest: make socket directory: %w", err)
	}
	if c.cred != nil {
		for _, dir := range []string{c.root, c.sockDir()} {
			if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
				return fmt.Errorf("pgtxtest: hand %s to the postgres user: %w", dir, err)
			}
		}
	}
	return nil
}

// start runs the postmaster on c.port and waits until it accepts connections.
func (c *localCluster) start(ctx context.Context) error {
	args := []string{
		"-D", c.dataDir(),
		"-p", strconv.Itoa(c.port),
		"-k", c.sockDir(),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=" + defaultMaxConns,
		// Segments live in the data directory, so a killed server leaves nothing in /dev/shm.
		"-c", "dynamic_shared_memory_type=mmap",
	}
	args = append(args, proc.SettingArgs(c.settings)...)
	cmd := exec.Command(filepath.Join(c.bindir, "postgres"), args...)
	cmd.Dir = c.root
	p, _, err := proc.Launch{Name: "postgres", Port: c.port, Log: c.logPath(), Cmd: cmd, Cred: c.cred,
		Ready: func(ctx context.Context, p *proc.Process, _ int64) error {
			return proc.WaitPostgres(ctx, c.dsn().String(), c.dataDir(), p, readyTimeout)
		},
		Stop: func(p *proc.Process) error {
			c.proc = p
			return c.stopProcess(syscall.SIGQUIT)
		},
	}.Run(ctx)
	if err != nil {
		return err
	}
	c.proc = p
	return nil
}

// stopProcess signals the postmaster (SIGINT: fast shutdown, SIGQUIT: immediate) and
// waits until it has exited, sending SIGKILL if it does not within stopTimeout.
func (c *localCluster) stopProcess(sig syscall.Signal) error {
	p := c.proc
	if p == nil {
		return nil
	}
	c.proc = nil
	return p.Stop("postgres", sig, stopTimeout)
}

// restart stops the server, waits downtime and starts it on the same port.
func (c *localCluster) restart(ctx context.Context, downtime time.Duration) error {
	if err := c.stopProcess(syscall.SIGINT); err != nil {
		return err
	}
	timer := time.NewTimer(downtime)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("during downtime: %w", ctx.Err())
	case <-timer.C:
	}
	return c.start(ctx)
}

// crash stops the server with an immediate shutdown, waiting at most until ctx ends.
func (c *localCluster) crash(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := c.proc
	c.proc = nil
	timeout := stopTimeout
	if deadline, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(deadline))
	}
	return p.Stop("postgres", syscall.SIGQUIT, max(timeout, 0))
}

// destroy stops the server and removes its directory.
func (c *localCluster) destroy(context.Context) error {
	return errors.Join(c.stopProcess(syscall.SIGINT), os.RemoveAll(c.root))
}

// sweepStaleClusters removes the cluster directories in base of test binaries that
// died without cleaning up (their servers died with them, see serverSysProcAttr).
func sweepStaleClusters(base string) {
	for _, dir := range proc.DeadBinariesDirs(base, "pgtx-pgtest-cluster-") {
		_ = os.RemoveAll(dir)
	}
}
