package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// cpuProbe measures, around each batch of calls of the only worker, the CPU
// time the benchmark process used and the CPU time of the server backend the
// batch ran on. Wall time on a shared machine moves with scheduling luck;
// CPU time per call moves far less, and says which side a difference is on.
// The server's side is read from /proc, so it is known only when the server
// runs on this machine (the throwaway server does).
type cpuProbe struct {
	pids []int // backend pid of each contender's one connection; 0: unknown
}

// newCPUProbe finds the backend of each contender's connection; pools must
// have one connection each.
func newCPUProbe(ctx context.Context, rows []func(ctx context.Context, sql string, args ...any) pgx.Row) *cpuProbe {
	p := &cpuProbe{pids: make([]int, len(rows))}
	for i, queryRow := range rows {
		var pid int
		if err := queryRow(ctx, "select pg_backend_pid()").Scan(&pid); err == nil && isBackend(pid) {
			p.pids[i] = pid
		}
	}
	return p
}

// isBackend reports whether pid is a PostgreSQL process of this machine, not
// a pid of another namespace (a server in a container) that happens to exist
// here.
func isBackend(pid int) bool {
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return err == nil && strings.TrimSpace(string(comm)) == "postgres"
}

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendCPU is the CPU time of process pid so far, from the first field of
// /proc/pid/schedstat (nanoseconds on a CPU).
func backendCPU(pid int) (time.Duration, bool) {
	if pid == 0 {
		return 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, false
	}
	f, _, _ := bytes.Cut(b, []byte(" "))
	ns, err := strconv.ParseInt(string(f), 10, 64)
	return time.Duration(ns), err == nil
}

// cpuTally is what a cpuProbe measured for one contender.
type cpuTally struct {
	client, server time.Duration
	calls          int64 // calls measured
	serverCalls    int64 // calls whose server side was measured
}

// around measures batch, run by contender i, into t.
func (p *cpuProbe) around(i int, t *cpuTally, batch func() int) {
	c0 := processCPU()
	s0, sok := backendCPU(p.pids[i])
	n := batch()
	c1 := processCPU()
	s1, sok1 := backendCPU(p.pids[i])
	t.client += c1 - c0
	t.calls += int64(n)
	if sok && sok1 {
		t.server += s1 - s0
		t.serverCalls += int64(n)
	}
}

// perCall returns the client and server CPU per call in microseconds; a
// side that was not measured is 0.
func (t cpuTally) perCall() (client, server float64) {
	if t.calls > 0 {
		client = usf(t.client) / float64(t.calls)
	}
	if t.serverCalls > 0 {
		server = usf(t.server) / float64(t.serverCalls)
	}
	return client, server
}
