package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is one run of a server the harness started (the postmaster,
// or a PgBouncer). Its reaper goroutine, started with it, ends when the
// process exits; done is closed then.
type Process struct {
	Cmd     *exec.Cmd
	Done    chan struct{}
	WaitErr error // valid once done is closed
}

// Start starts cmd and the reaper goroutine that waits for it.
func Start(cmd *exec.Cmd) (*Process, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{Cmd: cmd, Done: make(chan struct{})}
	go func() {
		p.WaitErr = cmd.Wait()
		close(p.Done)
	}()
	return p, nil
}

// Stop sends sig to the process named name and waits until it has exited,
// sending SIGKILL if it has not within timeout.
func (p *Process) Stop(name string, sig syscall.Signal, timeout time.Duration) error {
	_ = p.Cmd.Process.Signal(sig) // fails only if it has exited already
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.Done:
		return nil
	case <-timer.C:
	}
	_ = p.Cmd.Process.Kill()
	timer.Reset(KillGrace)
	select {
	case <-p.Done:
		return fmt.Errorf("%s ignored %v for %v and was killed", name, sig, timeout)
	case <-timer.C:
		return fmt.Errorf("%s (pid %d) survived SIGKILL for %v", name, p.Cmd.Process.Pid, KillGrace)
	}
}

// WaitReady calls probe every 25ms until it says not to try again, the
// process named name exits, or ctx ends. It returns probe's last error.
func (p *Process) WaitReady(ctx context.Context, name string, probe func(context.Context) (again bool, err error)) error {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		again, err := probe(ctx)
		if !again {
			return err
		}
		select {
		case <-p.Done:
			return fmt.Errorf("the %s process exited (%v)", name, p.WaitErr)
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last error: %w)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// Env is the environment of initdb and postgres: ours without libpq's PG*
// variables, in the C locale.
func Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// Credential returns the credential to run the server with: the postgres
// system user when running as root (Postgres refuses to run as root), else nil.
func Credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtxtest: running as root, the server needs the \"postgres\" system user: %w", err)
	}
	uid, errU := strconv.ParseUint(u.Uid, 10, 32)
	gid, errG := strconv.ParseUint(u.Gid, 10, 32)
	if errU != nil || errG != nil {
		return nil, fmt.Errorf("pgtxtest: user postgres has a non-numeric uid %q or gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// DeadBinariesDirs returns the directories in base named prefix<pid>-… whose
// test binary (pid) has exited without removing them: what the harness made
// for a server, a bouncer or a formation, left by a binary that was killed.
func DeadBinariesDirs(base, prefix string) []string {
	entries, err := os.ReadDir(base)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			dirs = append(dirs, filepath.Join(base, e.Name()))
		}
	}
	return dirs
}

// Tail returns up to the last n bytes of a file written after offset start, for
// error messages.
func Tail(path string, start, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil {
		start = max(start, st.Size()-n, 0)
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, n))
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	return string(b)
}
