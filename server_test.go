package pgtx

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// The few tests of this package that need a server and pgtx's unexported
// state get one from the harness without the root module depending on it:
// the harness's pgtest-serve command runs as a subprocess (go run, in the
// workspace), prints the server's DSN, and stops the server when its
// standard input closes. PGTX_TEST_DATABASE_URL or DATABASE_URL, when set,
// is used instead.

// serveCmd is the harness command, a package of the workspace's
// internal/pgtest module.
const serveCmd = "github.com/pgtx-go/pgtx/internal/pgtest/cmd/pgtest-serve"

// testServer is the server of this test binary, started on first use.
type testServer struct {
	once  sync.Once
	dsn   string
	err   string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

var server testServer

// serverDSN returns the DSN of a real server, or skips the test saying how
// to get one; under CI=true, no server is a failure.
func serverDSN(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"PGTX_TEST_DATABASE_URL", "DATABASE_URL"} {
		if dsn := strings.TrimSpace(os.Getenv(name)); dsn != "" {
			return dsn
		}
	}
	server.once.Do(server.start)
	if server.err != "" {
		msg := "no PostgreSQL server: " + server.err + "; run the tests from the repository's workspace (go test work), or set PGTX_TEST_DATABASE_URL"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return server.dsn
}

func (s *testServer) start() {
	cmd := exec.Command("go", "run", serveCmd)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		s.err = err.Error()
		return
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		s.err = err.Error()
		return
	}
	if err := cmd.Start(); err != nil {
		s.err = "go run " + serveCmd + ": " + err.Error()
		return
	}
	s.cmd, s.stdin = cmd, stdin
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		if dsn, ok := strings.CutPrefix(strings.TrimSpace(l), "DSN "); ok && dsn != "" {
			s.dsn = dsn
			return
		}
		s.err = "go run " + serveCmd + " printed no DSN (see its output above)"
	case <-time.After(5 * time.Minute):
		s.err = "go run " + serveCmd + " gave no DSN within 5 minutes"
	}
	s.stop()
}

// stop stops the server this binary started, if any, and waits for it.
func (s *testServer) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.stdin.Close()
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}
