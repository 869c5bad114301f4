package formation

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

// env is the environment of pg_autoctl: the servers' (no PG* variables), with
// pg_autoctl's files under the formation's directory rather than the postgres
// user's home and /tmp, so that formations never share them, and every member's
// Unix socket in the formation's socket directory (pg_autoctl passes
// PG_REGRESS_SOCK_DIR to postgres as -k, and connects through PGHOST).
func (f *Formation) env() []string {
	xdg := filepath.Join(f.root, "xdg")
	return append(proc.Env(),
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
	cmd.SysProcAttr = proc.SysProcAttr(f.cred)
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
	logStart := proc.LogSize(m.logPath())
	cmd := exec.CommandContext(ctx, f.bin, args...)
	out, err := f.prepare(cmd, m)
	if err != nil {
		return err
	}
	defer out.Close() // the child has its own copy of the descriptor
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = proc.KillGrace
	if err := cmd.Run(); err != nil {
		return m.failed("pg_autoctl "+strings.Join(args[:2], " "), err, logStart)
	}
	return nil
}

// failed describes the failure of what for m with the tail of m's log since
// logStart; a port taken by someone else makes it proc.ErrPortTaken.
func (m *formationMember) failed(what string, err error, logStart int64) error {
	logTail := proc.Tail(m.logPath(), logStart, 4096)
	startup := proc.Tail(filepath.Join(m.dataDir(), "startup.log"), 0, 4096)
	err = fmt.Errorf("pgtxtest: formation: %s for %s (port %d): %w\npg_autoctl log:\n%s", what, m.name, m.port, err, logTail)
	if strings.Contains(logTail+startup, "Address already in use") {
		err = errors.Join(proc.ErrPortTaken, err)
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
	p, err := proc.Start(cmd)
	if err != nil {
		return fmt.Errorf("pgtxtest: start pg_autoctl run for %s: %w", m.name, err)
	}
	m.proc = p
	return os.WriteFile(m.pgidPath(), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
}

// startMember starts m's pg_autoctl run and waits until ready returns nil, the
// process exits, ctx ends or formationWaitTimeout passes.
func (f *Formation) startMember(ctx context.Context, m *formationMember, ready func(context.Context) error) error {
	logStart := proc.LogSize(m.logPath())
	f.mu.Lock()
	err := f.run(m)
	p := m.proc
	f.mu.Unlock()
	if err != nil {
		return fmt.Errorf("pgtxtest: formation: start %s: %w", m.name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, formationWaitTimeout)
	defer cancel()
	err = p.WaitReady(ctx, "pg_autoctl run", func(ctx context.Context) (bool, error) {
		err := ready(ctx)
		return err != nil, err
	})
	if err != nil {
		return m.failed("pg_autoctl run", err, logStart)
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
			_ = m.proc.Cmd.Process.Signal(syscall.SIGTERM) // fails only if it has exited already
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
		pgid := p.Cmd.Process.Pid
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-p.Done:
			timer.Stop()
			if pid := m.postmasterPID(); pid != 0 && inGroup(pid, pgid) {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				errs = append(errs, fmt.Errorf("pg_autoctl run of %s exited and left its postgres (pid %d) running, killed", m.name, pid))
			}
		case <-timer.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			timer.Reset(proc.KillGrace)
			select {
			case <-p.Done:
				errs = append(errs, fmt.Errorf("pg_autoctl run of %s ignored SIGTERM for %v and was killed", m.name, autoctlStopTimeout))
			case <-timer.C:
				errs = append(errs, fmt.Errorf("pg_autoctl run of %s (pid %d) survived SIGKILL for %v", m.name, pgid, proc.KillGrace))
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
	for _, root := range proc.DeadBinariesDirs(base, formationDirPrefix) {
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
