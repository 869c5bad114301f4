package formation

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

// The kit's settings of a formation's members, before the caller's (see
// Config).
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

// startFormation is New without the testing.TB, trying again in a new
// directory on new ports when a port was taken meanwhile.
func startFormation(ctx context.Context, bin, bindir string, opts Config) (*Formation, error) {
	var err error
	for range proc.StartAttempts {
		var f *Formation
		if f, err = tryStartFormation(ctx, bin, bindir, opts); !errors.Is(err, proc.ErrPortTaken) {
			return f, err
		}
	}
	return nil, err
}

// tryStartFormation makes the formation's directory, creates and runs the monitor,
// then node1 and node2, and waits until node1 is primary and node2 secondary.
func tryStartFormation(ctx context.Context, bin, bindir string, opts Config) (*Formation, error) {
	cred, err := proc.Credential()
	if err != nil {
		return nil, err
	}
	base := proc.BaseDir()
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
func (f *Formation) create(ctx context.Context, opts Config) error {
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
			"--username", proc.Superuser, "--auth", "trust", "--no-ssl", "--pgctl", filepath.Join(f.bindir, "pg_ctl"),
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
	b.WriteString("# The settings of pgtxtest's New, included last by postgresql.conf.\n")
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

// freePorts returns n distinct free ports.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for len(ports) < n {
		port, err := proc.FreePort()
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
	}
	return ports, nil
}
