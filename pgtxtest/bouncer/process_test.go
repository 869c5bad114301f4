package bouncer

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

func TestBouncerStop(t *testing.T) {
	t.Parallel()
	e := newBouncerEnv(t, Config{Mode: PoolSession})
	ctx := testContext(t)
	c := kittest.ConnectConfig(t, ctx, bouncerConnConfig(t, e.via))
	kittest.ExecOK(t, ctx, c, "begin")
	kittest.ExecOK(t, ctx, c, "select 1")
	pid := e.b.proc.Cmd.Process.Pid

	start := time.Now()
	if err := e.b.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Stop with a client in a transaction took %v", took)
	}
	if err := e.b.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pgbouncer (pid %d) still exists after Stop: kill(0) = %v", pid, err)
	}
	if _, err := os.Stat(e.b.dir); !os.IsNotExist(err) {
		t.Errorf("directory %s after Stop: %v, want it removed", e.b.dir, err)
	}
	ln, err := net.Listen("tcp", e.b.Addr())
	if err != nil {
		t.Fatalf("port of the stopped bouncer: %v", err)
	}
	_ = ln.Close()
	if _, err := c.Exec(ctx, "select 1"); err == nil {
		t.Error("a client of the stopped bouncer still runs queries")
	}
}

func TestBouncerPortTaken(t *testing.T) {
	t.Parallel()
	s := server.Shared(t)
	bin, err := pgbouncer.Find(os.Getenv)
	if err != nil {
		t.Skip(err)
	}
	dir := kittest.ProgramDir(t, bouncerDirPrefix)
	b := &Bouncer{server: s, bin: bin, dir: dir, user: proc.Superuser, port: kittest.TakenPort(t)}
	if b.cred, err = proc.Credential(); err != nil {
		t.Fatal(err)
	}
	if err := b.prepare(""); err != nil {
		t.Fatal(err)
	}
	cfg, err := Config{}.config()
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(s.Addr())
	if err := b.writeConfig(cfg, host, port); err != nil {
		t.Fatal(err)
	}
	err = b.start(context.Background())
	kittest.CheckPortTaken(t, err, b.proc != nil)
}

func TestBouncerSweepsDeadBinariesDirs(t *testing.T) {
	t.Parallel()
	sw := kittest.NewSweep(t, bouncerDirPrefix, "pgtx-pgtest-cluster-999999999-1")
	sweepStaleBouncers(sw.Base)
	sw.Check(t)
}

func TestBouncerMissingBinary(t *testing.T) {
	t.Parallel()
	env := func(vars map[string]string) func(string) string {
		return func(name string) string { return vars[name] }
	}
	_, err := pgbouncer.Find(env(map[string]string{"PGTX_TEST_PGBOUNCER": "/nonexistent/pgbouncer"}))
	if err == nil || !strings.Contains(err.Error(), "PGTX_TEST_PGBOUNCER=/nonexistent/pgbouncer") {
		t.Fatalf("Find with a bad PGTX_TEST_PGBOUNCER = %v", err)
	}
	for _, ci := range []string{"", "true"} {
		fail, msg := pgbouncer.Missing(env(map[string]string{"CI": ci}), err)
		if fail != (ci == "true") || !strings.Contains(msg, "apt-get install pgbouncer") || !strings.Contains(msg, "/nonexistent/pgbouncer") {
			t.Errorf("CI=%q: Missing = %v, %q", ci, fail, msg)
		}
	}
}
