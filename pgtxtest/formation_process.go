package pgtxtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// The kit's settings of a formation's members, before the caller's (see
// FormationOptions).
var (
	formationServerSettings = map[string]string{
		"shared_buffers": "128MB",
		"fsync":          "off",
		// Segments live in the data directory, so a killed server leaves nothing in /dev/shm.
		"dynamic_shared_memory_type": "mmap",
	}
	formationNodeSettings = map[string]string{
		"wal_retrieve_retry_interval": "500ms",
	}
	formationMonitorSettings = map[string]string{
		"pgautofailover.health_check_period":               "1000",
		"pgautofailover.health_check_timeout":              "1000",
		"pgautofailover.health_check_max_retries":          "1",
		"pgautofailover.health_check_retry_delay":          "500",
		"pgautofailover.node_considered_unhealthy_timeout": "2000",
		"pgautofailover.primary_demote_timeout":            "3000",
		"pgautofailover.startup_grace_period":              "1000",
	}
	// The keepers' own settings (pg_autoctl config set), in seconds.
	formationKeeperSettings = map[string]string{
		"timeout.network_partition_timeout": "2",
	}
)

// startFormation is StartFormation without the testing.TB, trying again in a new
// directory on new ports when a port was taken meanwhile.
func startFormation(ctx context.Context, bin, bindir string, opts FormationOptions) (*Formation, error) {
	var err error
	for range startAttempts {
		var f *Formation
		if f, err = tryStartFormation(ctx, bin, bindir, opts); !errors.Is(err, errPortTaken) {
			return f, err
		}
	}
	return nil, err
}

// tryStartFormation makes the formation's directory, creates and runs the monitor,
// then node1 and node2, and waits until node1 is primary and node2 secondary.
func tryStartFormation(ctx context.Context, bin, bindir string, opts FormationOptions) (*Formation, error) {
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	base := clusterBaseDir()
	sweepStaleFormations(base)
	root, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-", formationDirPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("pgtxtest: make formation directory: %w", err)
	}
	f := &Formation{bin: bin, bindir: bindir, root: root, database: opts.Database, cred: cred}
	if f.database == "" {
		f.database = "app"
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(root))
	}
	f.monitor = &formationMember{name: monitorName, root: root, port: ports[0]}
	f.nodes = []*formationMember{
		{name: "node1", root: root, port: ports[1]},
		{name: "node2", root: root, port: ports[2]},
	}
	if err := f.makeDirs(); err != nil {
		return nil, errors.Join(err, os.RemoveAll(root))
	}
	if err := f.create(ctx, opts); err != nil {
		return nil, errors.Join(err, f.Stop())
	}
	return f, nil
}

// create creates and runs each member in turn: a node registers with a running
// monitor, and the second node copies the running first one.
func (f *Formation) create(ctx context.Context, opts FormationOptions) error {
	m := f.monitor
	if err := f.autoctl(ctx, m, "create", "monitor", "--pgdata", m.dataDir(), "--pgport", strconv.Itoa(m.port),
		"--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--auth", "trust", "--no-ssl",
		"--pgctl", filepath.Join(f.bindir, "pg_ctl")); err != nil {
		return err
	}
	if err := f.writeSettings(m, formationServerSettings, formationMonitorSettings, opts.MonitorSettings); err != nil {
		return err
	}
	if err := f.startMember(ctx, m, func(ctx context.Context) error {
		return f.queryMonitor(ctx, func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "SELECT 1 FROM pgautofailover.formation")
			return err
		})
	}); err != nil {
		return err
	}

	for _, n := range f.nodes {
		if err := f.autoctl(ctx, n, "create", "postgres", "--pgdata", n.dataDir(), "--pgport", strconv.Itoa(n.port),
			"--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--name", n.name, "--dbname", f.database,
			"--username", superuser, "--auth", "trust", "--no-ssl", "--pgctl", filepath.Join(f.bindir, "pg_ctl"),
			"--monitor", f.MonitorDSN()); err != nil {
			return err
		}
		for _, name := range slices.Sorted(maps.Keys(formationKeeperSettings)) {
			if err := f.autoctl(ctx, n, "config", "set", "--pgdata", n.dataDir(), name, formationKeeperSettings[name]); err != nil {
				return err
			}
		}
		if err := f.writeSettings(n, formationServerSettings, formationNodeSettings, opts.Settings); err != nil {
			return err
		}
		since := time.Now()
		if err := f.startMember(ctx, n, func(ctx context.Context) error { return f.reportedSince(ctx, n, since) }); err != nil {
			return err
		}
	}
	if _, err := f.WaitState(ctx, map[string]string{"node1": "primary", "node2": "secondary"}); err != nil {
		return fmt.Errorf("%w\n%s", err, f.logTails())
	}
	return nil
}

// makeDirs makes the formation's socket directory and the base of pg_autoctl's
// configuration, state and pid files (XDG_* in env), and hands them with the root to
// the server's user.
func (f *Formation) makeDirs() error {
	dirs := []string{f.root, f.sockDir(), filepath.Join(f.root, "xdg"), filepath.Join(f.root, "xdg", "run")}
	for _, dir := range dirs[1:] {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fmt.Errorf("pgtxtest: make formation directory: %w", err)
		}
	}
	if f.cred != nil {
		for _, dir := range dirs {
			if err := os.Chown(dir, int(f.cred.Uid), int(f.cred.Gid)); err != nil {
				return fmt.Errorf("pgtxtest: hand %s to the postgres user: %w", dir, err)
			}
		}
	}
	return nil
}

func (f *Formation) sockDir() string { return filepath.Join(f.root, "sock") }

// env is the environment of pg_autoctl: the servers' (no PG* variables), with
// pg_autoctl's files under the formation's directory rather than the postgres
// user's home and /tmp, so that formations never share them, and every member's
// Unix socket in the formation's socket directory (pg_autoctl passes
// PG_REGRESS_SOCK_DIR to postgres as -k, and connects through PGHOST).
func (f *Formation) env() []string {
	xdg := filepath.Join(f.root, "xdg")
	return append(serverEnv(),
		"HOME="+f.root,
		"XDG_CONFIG_HOME="+filepath.Join(xdg, "config"),
		"XDG_DATA_HOME="+filepath.Join(xdg, "data"),
		"XDG_RUNTIME_DIR="+filepath.Join(xdg, "run"),
		"PG_REGRESS_SOCK_DIR="+f.sockDir(),
		"PGHOST="+f.sockDir(),
	)
}

// prepare makes cmd, a pg_autoctl command, run as the server's user in a process
// group of its own, its output appended to m's log, which it returns open.
func (f *Formation) prepare(cmd *exec.Cmd, m *formationMember) (*os.File, error) {
	out, err := os.OpenFile(m.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgtxtest: open %s: %w", m.logPath(), err)
	}
	cmd.Dir = f.root
	cmd.Env = f.env()
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = serverSysProcAttr(f.cred)
	// pg_autoctl runs its services and postgres as its children, in its process
	// group: signalling the group reaches them all.
	cmd.SysProcAttr.Setpgid = true
	return out, nil
}

// autoctl runs one pg_autoctl command for m to its end, bounded by
// autoctlCommandTimeout; at the end of that its process group is killed.
func (f *Formation) autoctl(ctx context.Context, m *formationMember, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, autoctlCommandTimeout)
	defer cancel()
	logStart := logSize(m.logPath())
	cmd := exec.CommandContext(ctx, f.bin, args...)
	out, err := f.prepare(cmd, m)
	if err != nil {
		return err
	}
	defer out.Close() // the child has its own copy of the descriptor
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = killGrace
	if err := cmd.Run(); err != nil {
		return m.failed("pg_autoctl "+strings.Join(args[:2], " "), err, logStart)
	}
	return nil
}

// failed describes the failure of what for m with the tail of m's log since
// logStart; a port taken by someone else makes it errPortTaken.
func (m *formationMember) failed(what string, err error, logStart int64) error {
	logTail := tail(m.logPath(), logStart, 4096)
	startup := tail(filepath.Join(m.dataDir(), "startup.log"), 0, 4096)
	err = fmt.Errorf("pgtxtest: formation: %s for %s (port %d): %w\npg_autoctl log:\n%s", what, m.name, m.port, err, logTail)
	if strings.Contains(logTail+startup, "Address already in use") {
		err = errors.Join(errPortTaken, err)
	}
	return err
}

// run starts m's pg_autoctl run and records its process group for
// sweepStaleFormations. The caller holds f.mu.
func (f *Formation) run(m *formationMember) error {
	switch {
	case f.stopped:
		return errors.New("the formation is stopped")
	case m.proc != nil:
		return fmt.Errorf("%s is running", m.name)
	}
	cmd := exec.Command(f.bin, "run", "--pgdata", m.dataDir())
	out, err := f.prepare(cmd, m)
	if err != nil {
		return err
	}
	defer out.Close()
	p, err := startProcess(cmd)
	if err != nil {
		return fmt.Errorf("pgtxtest: start pg_autoctl run for %s: %w", m.name, err)
	}
	m.proc = p
	return os.WriteFile(m.pgidPath(), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
}

// startMember starts m's pg_autoctl run and waits until ready returns nil, the
// process exits, ctx ends or formationWaitTimeout passes.
func (f *Formation) startMember(ctx context.Context, m *formationMember, ready func(context.Context) error) error {
	logStart := logSize(m.logPath())
	f.mu.Lock()
	err := f.run(m)
	p := m.proc
	f.mu.Unlock()
	if err != nil {
		return fmt.Errorf("pgtxtest: formation: start %s: %w", m.name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, formationWaitTimeout)
	defer cancel()
	err = p.waitReady(ctx, "pg_autoctl run", func(ctx context.Context) (bool, error) {
		err := ready(ctx)
		return err != nil, err
	})
	if err != nil {
		return m.failed("pg_autoctl run", err, logStart)
	}
	return nil
}

// writeSettings writes the settings, later maps overriding earlier ones, to
// pgtxtest.conf in m's data directory and has its postgresql.conf include that
// file last, after pg_auto_failover's own. (The second node's pg_basebackup copies
// both from the first.)
func (f *Formation) writeSettings(m *formationMember, layers ...map[string]string) error {
	settings := map[string]string{}
	for _, l := range layers {
		maps.Copy(settings, l)
	}
	var b strings.Builder
	b.WriteString("# The settings of pgtxtest's StartFormation, included last by postgresql.conf.\n")
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		fmt.Fprintf(&b, "%s = '%s'\n", name, strings.ReplaceAll(settings[name], "'", "''"))
	}
	path := filepath.Join(m.dataDir(), "pgtxtest.conf")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("pgtxtest: write %s: %w", path, err)
	}
	if f.cred != nil {
		// pg_rewind, run as the server's user, rewrites the file.
		if err := os.Chown(path, int(f.cred.Uid), int(f.cred.Gid)); err != nil {
			return fmt.Errorf("pgtxtest: hand %s to the postgres user: %w", path, err)
		}
	}
	conf := filepath.Join(m.dataDir(), "postgresql.conf")
	text, err := os.ReadFile(conf)
	if err != nil {
		return fmt.Errorf("pgtxtest: read %s: %w", conf, err)
	}
	const include = "include 'pgtxtest.conf'\n"
	if strings.Contains(string(text), include) {
		return nil
	}
	file, err := os.OpenFile(conf, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("pgtxtest: open %s: %w", conf, err)
	}
	_, err = file.WriteString("\n" + include)
	if err := errors.Join(err, file.Close()); err != nil {
		return fmt.Errorf("pgtxtest: write %s: %w", conf, err)
	}
	return nil
}

// stopMembers sends SIGTERM to the pg_autoctl run of each running member, which
// stops its services and its postgres (pg_ctl stop --mode fast), and waits until
// each has exited. A member whose process has not exited within autoctlStopTimeout,
// or that left its postgres running, has its process group killed. The caller holds
// Formation.mu.
func stopMembers(members ...*formationMember) error {
	for _, m := range members {
		if m.proc != nil {
			_ = m.proc.cmd.Process.Signal(syscall.SIGTERM) // fails only if it has exited already
		}
	}
	deadline := time.Now().Add(autoctlStopTimeout)
	var errs []error
	for _, m := range members {
		p := m.proc
		if p == nil {
			continue
		}
		m.proc = nil
		pgid := p.cmd.Process.Pid
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-p.done:
			timer.Stop()
			if pid := m.postmasterPID(); pid != 0 && inGroup(pid, pgid) {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				errs = append(errs, fmt.Errorf("pg_autoctl run of %s exited and left its postgres (pid %d) running, killed", m.name, pid))
			}
		case <-timer.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			timer.Reset(killGrace)
			select {
			case <-p.done:
				errs = append(errs, fmt.Errorf("pg_autoctl run of %s ignored SIGTERM for %v and was killed", m.name, autoctlStopTimeout))
			case <-timer.C:
				errs = append(errs, fmt.Errorf("pg_autoctl run of %s (pid %d) survived SIGKILL for %v", m.name, pgid, killGrace))
			}
		}
		_ = os.Remove(m.pgidPath())
	}
	return errors.Join(errs...)
}

// inGroup tells whether process pid is alive in process group pgid.
func inGroup(pid, pgid int) bool {
	g, err := syscall.Getpgid(pid)
	return err == nil && g == pgid
}

// sweepStaleFormations removes the formation directories in base of test binaries
// that died without cleaning up. Their pg_autoctl run processes died with them (see
// serverSysProcAttr), but not the postgres each ran, nor pg_autoctl's postgres
// controller: what is left of each recorded process group is killed first, when
// the group is still the one whose postmaster.pid is there.
func sweepStaleFormations(base string) {
	for _, root := range deadBinariesDirs(base, formationDirPrefix) {
		files, _ := filepath.Glob(filepath.Join(root, "*.pgid"))
		for _, file := range files {
			b, err := os.ReadFile(file)
			pgid, convErr := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || convErr != nil || pgid <= 1 {
				continue
			}
			m := &formationMember{name: strings.TrimSuffix(filepath.Base(file), ".pgid"), root: root}
			if pid := m.postmasterPID(); pid != 0 && inGroup(pid, pgid) {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		}
		_ = os.RemoveAll(root)
	}
}

// freePorts returns n distinct free ports.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for len(ports) < n {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
	}
	return ports, nil
}
