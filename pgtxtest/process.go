package pgtxtest

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
)

// serverProcess is one run of a server the harness started (the postmaster,
// or a PgBouncer). Its reaper goroutine, started with it, ends when the
// process exits; done is closed then.
type serverProcess struct {
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error // valid once done is closed
}

// startProcess starts cmd and the reaper goroutine that waits for it.
func startProcess(cmd *exec.Cmd) (*serverProcess, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &serverProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop sends sig to the process named name and waits until it has exited,
// sending SIGKILL if it has not within timeout.
func (p *serverProcess) stop(name string, sig syscall.Signal, timeout time.Duration) error {
	_ = p.cmd.Process.Signal(sig) // fails only if it has exited already
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	_ = p.cmd.Process.Kill()
	timer.Reset(killGrace)
	select {
	case <-p.done:
		return fmt.Errorf("%s ignored %v for %v and was killed", name, sig, timeout)
	case <-timer.C:
		return fmt.Errorf("%s (pid %d) survived SIGKILL for %v", name, p.cmd.Process.Pid, killGrace)
	}
}

// waitReady calls probe every 25ms until it says not to try again, the
// process named name exits, or ctx ends. It returns probe's last error.
func (p *serverProcess) waitReady(ctx context.Context, name string, probe func(context.Context) (again bool, err error)) error {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		again, err := probe(ctx)
		if !again {
			return err
		}
		select {
		case <-p.done:
			return fmt.Errorf("the %s process exited (%v)", name, p.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last error: %w)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// deadBinariesDirs returns the directories in base named prefix<pid>-… whose
// test binary (pid) has exited without removing them: what the harness made
// for a server, a bouncer or a formation, left by a binary that was killed.
func deadBinariesDirs(base, prefix string) []string {
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
