package pgpool

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// TestPgpoolStop: Stop ends pgpool at once with a client in a transaction, with
// its children and shared memory, removes its directory, and is idempotent.
func TestPgpoolStop(t *testing.T) {
	t.Parallel()
	skipShort(t)
	p := New(t, server.New(t, nil), nil, &Config{NumInitChildren: 2})
	ctx := testContext(t)
	c := kittest.Connect(t, p.DSN(""))
	kittest.ExecOK(t, ctx, c, "BEGIN")
	kittest.ExecOK(t, ctx, c, "SELECT 1")
	pid := p.proc.Cmd.Process.Pid
	group := append(pgpoolsInGroup(pid, p.bin), pid)
	if ids, _ := sharedMemoryOf(group...); len(ids) == 0 && fileExists("/proc/sysvipc/shm") {
		t.Errorf("pgpool (pid %d) has no shared memory in /proc/sysvipc/shm", pid)
	}
	if ids := semaphoresOf(group...); len(ids) != 1 && fileExists("/proc/sysvipc/sem") {
		t.Errorf("pgpool (pid %d) has semaphore sets %v, want one", pid, ids)
	}

	start := time.Now()
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Stop with a client in a transaction took %v", took)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pgpool's process group %d still exists after Stop: kill(0) = %v", pid, err)
	}
	if ids, _ := sharedMemoryOf(group...); len(ids) != 0 {
		t.Errorf("pgpool's shared memory %v is left after Stop", ids)
	}
	if ids := semaphoresOf(group...); len(ids) != 0 {
		t.Errorf("pgpool's semaphores %v are left after Stop", ids)
	}
	if fileExists(p.dir) {
		t.Errorf("directory %s is left after Stop", p.dir)
	}
	ln, err := net.Listen("tcp", p.Addr())
	if err != nil {
		t.Fatalf("port of the stopped pgpool: %v", err)
	}
	_ = ln.Close()
	if _, err := c.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("a client of the stopped pgpool still runs queries")
	}
	if err := p.Restart(ctx); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("Restart of a stopped pgpool = %v, want an error that says it is stopped", err)
	}
}

// TestPgpoolOrphans: when pgpool itself is killed, as when the test binary dies,
// its children live on; what the sweep does for a dead binary's pgpool kills them
// and releases the shared memory.
func TestPgpoolOrphans(t *testing.T) {
	t.Parallel()
	if !fileExists("/proc/sysvipc/shm") {
		t.Skip("needs Linux's /proc")
	}
	skipShort(t)
	p := New(t, server.New(t, nil), nil, &Config{NumInitChildren: 2})
	pid := p.proc.Cmd.Process.Pid
	if err := p.proc.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.proc.Done
	orphans := pgpoolsInGroup(pid, p.bin)
	if len(orphans) < 2 {
		t.Fatalf("pgpool's children after pgpool was killed: %v, want its 2 children at least", orphans)
	}
	for _, o := range orphans {
		_ = syscall.Kill(o, syscall.SIGKILL)
	}
	all := append(orphans, pid)
	removeIPC(all)
	if left := pgpoolsInGroup(pid, p.bin); len(left) != 0 {
		t.Errorf("pgpool processes %v left in group %d", left, pid)
	}
	if ids, _ := sharedMemoryOf(all...); len(ids) != 0 {
		t.Errorf("shared memory %v of the killed pgpool is left", ids)
	}
	if ids := semaphoresOf(all...); len(ids) != 0 {
		t.Errorf("semaphores %v of the killed pgpool are left", ids)
	}
}

func TestPgpoolPortTaken(t *testing.T) {
	t.Parallel()
	skipShort(t)
	s := server.New(t, nil)
	bin, err := pgpool2.Find(os.Getenv)
	if err != nil {
		t.Skip(err)
	}
	dir := kittest.ProgramDir(t, pgpoolDirPrefix)
	params, err := serverParams([]*server.Server{s})
	if err != nil {
		t.Fatal(err)
	}
	p := &Pgpool{primary: s, bin: bin, dir: dir, user: params.user, nodes: 1, port: kittest.TakenPort(t)}
	if p.pcpPort, err = proc.FreePort(); err != nil {
		t.Fatal(err)
	}
	if p.cred, err = proc.Credential(); err != nil {
		t.Fatal(err)
	}
	if err := p.prepare(); err != nil {
		t.Fatal(err)
	}
	cfg, err := Config{}.config()
	if err != nil {
		t.Fatal(err)
	}
	params.dir, params.port, params.pcpPort = dir, p.port, p.pcpPort
	if err := p.writeFile(p.confPath(), cfg.confText(params)); err != nil {
		t.Fatal(err)
	}
	err = p.start(context.Background())
	kittest.CheckPortTaken(t, err, p.proc != nil)
}

func TestPgpoolSweepsDeadBinariesDirs(t *testing.T) {
	t.Parallel()
	sw := kittest.NewSweep(t, pgpoolDirPrefix, "pgtx-pgtest-bouncer-999999999-1")
	// A pid file naming a group that is gone, in pgpool's format.
	if err := os.WriteFile(filepath.Join(sw.Dead, "pgpool.pid"), []byte("999999998\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	sweepStalePgpools(sw.Base, pgpoolDefaultPath)
	sw.Check(t)
}

func TestPgpoolMissingBinary(t *testing.T) {
	t.Parallel()
	env := func(vars map[string]string) func(string) string {
		return func(name string) string { return vars[name] }
	}
	_, err := pgpool2.Find(env(map[string]string{"PGTX_TEST_PGPOOL": "/nonexistent/pgpool"}))
	if err == nil || !strings.Contains(err.Error(), "PGTX_TEST_PGPOOL=/nonexistent/pgpool") {
		t.Fatalf("Find with a bad PGTX_TEST_PGPOOL = %v", err)
	}
	for _, ci := range []string{"", "true"} {
		fail, msg := pgpool2.Missing(env(map[string]string{"CI": ci}), err)
		if fail != (ci == "true") || !strings.Contains(msg, "apt-get install pgpool2") || !strings.Contains(msg, "/nonexistent/pgpool") {
			t.Errorf("CI=%q: Missing = %v, %q", ci, fail, msg)
		}
	}
}

// fileExists tells whether path exists.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
