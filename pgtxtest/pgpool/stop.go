package pgpool

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

// stopProcess sends SIGINT, pgpool's fast shutdown, and waits until pgpool has
// exited, which it does once its children have. If it has not within
// pgpoolStopTimeout, its process group is killed. The caller holds p.mu, or is
// start.
func (p *Pgpool) stopProcess() error {
	pr := p.proc
	if pr == nil {
		return nil
	}
	p.proc = nil
	pgid := pr.Cmd.Process.Pid
	_ = pr.Cmd.Process.Signal(syscall.SIGINT) // fails only if it has exited already
	timer := time.NewTimer(pgpoolStopTimeout)
	defer timer.Stop()
	select {
	case <-pr.Done:
		return nil
	case <-timer.C:
	}
	members := pgpoolsInGroup(pgid, p.bin)
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // pgpool is alive: the group is still its own
	timer.Reset(proc.KillGrace)
	select {
	case <-pr.Done:
		removeIPC(append(members, pgid))
		return fmt.Errorf("pgpool ignored SIGINT for %v and was killed with its children", pgpoolStopTimeout)
	case <-timer.C:
		return fmt.Errorf("pgpool (pid %d) survived SIGKILL for %v", pgid, proc.KillGrace)
	}
}

// sweepStalePgpools removes the pgpool directories in base of test binaries that
// died without cleaning up. Their pgpools died with them (see proc.SysProcAttr),
// but not pgpool's children, which keep its port, nor its shared memory and
// semaphores: what is left of each process group named in a pid file, processes
// running bin, is killed and released first.
func sweepStalePgpools(base, bin string) {
	for _, dir := range proc.DeadBinariesDirs(base, pgpoolDirPrefix) {
		b, err := os.ReadFile(filepath.Join(dir, "pgpool.pid"))
		pgid, convErr := strconv.Atoi(strings.Trim(string(b), "\x00 \n")) // "<pid>\x00"
		if err == nil && convErr == nil && pgid > 1 {
			members := pgpoolsInGroup(pgid, bin)
			for _, pid := range members {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			removeIPC(append(members, pgid))
		}
		_ = os.RemoveAll(dir)
	}
}

// pgpoolsInGroup returns the live processes of process group pgid that run bin,
// as Linux's /proc lists them (elsewhere: none).
func pgpoolsInGroup(pgid int, bin string) []int {
	name := filepath.Base(bin)
	name = name[:min(len(name), 15)] // the kernel keeps 15 bytes of a command's name
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		open, closing := strings.IndexByte(string(stat), '('), strings.LastIndexByte(string(stat), ')')
		if err != nil || open < 0 || closing < open {
			continue
		}
		comm := string(stat[open+1 : closing])
		fields := strings.Fields(string(stat[closing+1:])) // state, ppid, pgrp, ...
		if comm != name || len(fields) < 3 || fields[0] == "Z" || fields[2] != strconv.Itoa(pgid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}
