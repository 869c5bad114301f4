package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/client"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/testcontainers/testcontainers-go"
)

// On a machine without a Docker daemon the ping fails fast; where one runs, it answers.
// Either way it returns within its bound.
func TestDockerPingIsBounded(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), dockerPingTimeout)
	defer cancel()
	start := time.Now()
	err := dockerPing(ctx)
	took := time.Since(start)
	t.Logf("docker ping: %v after %v", err, took)
	if took > dockerPingTimeout+time.Second {
		t.Errorf("docker ping took %v, bound %v", took, dockerPingTimeout)
	}
	if err != nil && !strings.Contains(err.Error(), "DOCKER_HOST") && !strings.Contains(err.Error(), "socket") && !strings.HasPrefix(err.Error(), "at ") {
		t.Errorf("docker ping: %v: want it to say where a daemon was looked for", err)
	}
}

// Without a daemon, the ping's error says where one was looked for: DOCKER_HOST,
// else the default socket, else a rootless daemon's socket. testcontainers' closing
// "rootless Docker not found" is left out: it is said only when a rootless Docker is
// installed and not running, or its socket is there and does not answer.
func TestNoDockerDaemonSaysWhere(t *testing.T) {
	t.Parallel()
	rootlessNotFound := errors.New("rootless Docker not found")
	refused := errors.New("dial unix /var/run/docker.sock: connect: permission denied")
	tests := []struct {
		name     string
		env      map[string]string
		files    []string // the paths that exist
		rootless bool     // dockerd-rootless.sh is in PATH
		err      error    // testcontainers' error
		want     string
	}{
		{name: "nothing anywhere", err: rootlessNotFound,
			want: "DOCKER_HOST is not set and there is no socket at /var/run/docker.sock"},
		{name: "DOCKER_HOST that does not answer", env: map[string]string{"DOCKER_HOST": "tcp://10.0.0.9:2375"},
			err:  errors.Join(errors.New(`check host "tcp://10.0.0.9:2375": docker info: i/o timeout`), rootlessNotFound),
			want: `at DOCKER_HOST=tcp://10.0.0.9:2375: check host "tcp://10.0.0.9:2375": docker info: i/o timeout`},
		{name: "the default socket refuses", files: []string{"/var/run/docker.sock"}, err: errors.Join(refused, rootlessNotFound),
			want: "at the default socket /var/run/docker.sock: dial unix /var/run/docker.sock: connect: permission denied"},
		{name: "a rootless socket that does not answer", env: map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000"},
			files: []string{"/run/user/1000/docker.sock"}, err: errors.New("docker info: connection refused"),
			want: "at the rootless socket /run/user/1000/docker.sock: docker info: connection refused"},
		{name: "rootless Docker installed, not running", env: map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000"}, rootless: true, err: rootlessNotFound,
			want: "DOCKER_HOST is not set and there is no socket at /var/run/docker.sock; rootless Docker is installed (/usr/bin/dockerd-rootless.sh) " +
				"and not running: there is no socket at /run/user/1000/docker.sock (start it: systemctl --user start docker)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := dockerPlaces{
				getenv: kittest.FakeEnv(tc.env),
				exists: func(path string) bool { return slices.Contains(tc.files, path) },
				lookPath: func(file string) (string, error) {
					if tc.rootless {
						return "/usr/bin/" + file, nil
					}
					return "", exec.ErrNotFound
				},
				uid:  1000,
				home: "/home/u",
			}
			got := noDockerDaemon(d, tc.err).Error()
			if got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
			if !tc.rootless && strings.Contains(got, "rootless Docker") {
				t.Errorf("%q speaks of rootless Docker, which is not installed", got)
			}
			// As the harness shows it.
			t.Logf("no Docker daemon answered (%s)", got)
		})
	}
}

// Docker is chosen only when its ping answers, and only if no env DSN is set.
func TestDockerDecision(t *testing.T) {
	t.Parallel()
	errRefused := errors.New("connection refused")
	tests := []struct {
		name     string
		env      map[string]string
		ping     error
		want     string
		wantPing bool
	}{
		{name: "ping answers", ping: nil, want: KindDocker, wantPing: true},
		{name: "ping fails", ping: errRefused, want: KindLocal, wantPing: true},
		{name: "ping times out", ping: context.DeadlineExceeded, want: KindLocal, wantPing: true},
		{name: "env DSN set: no ping", env: map[string]string{"DATABASE_URL": "postgres://x@h/db"}, want: KindEnv},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pinged := false
			p := choose(context.Background(), probe{
				getenv:      kittest.FakeEnv(tc.env),
				dockerPing:  func(context.Context) error { pinged = true; return tc.ping },
				pingTimeout: time.Second,
				findBindir:  func() (string, error) { return "/bin", nil },
			})
			if p.kind != tc.want || pinged != tc.wantPing {
				t.Errorf("kind %q, pinged %v; want %q, %v", p.kind, pinged, tc.want, tc.wantPing)
			}
		})
	}
}

// PGTX_TEST_SERVER picks the kind whatever else the machine offers, and when that
// kind cannot be had, a test that needs the server fails, CI=true or not: there is
// no fallback to another kind.
func TestDockerForcedServer(t *testing.T) {
	t.Parallel()
	errRefused := errors.New("connection refused")
	const dsn = "postgres://x@h/db"
	tests := []struct {
		name     string
		env      map[string]string
		ping     error
		binErr   error
		want     string
		wantPing bool
		wantNote string
	}{
		{name: "docker over env and local", env: map[string]string{"PGTX_TEST_SERVER": "docker", "DATABASE_URL": dsn},
			want: KindDocker, wantPing: true},
		{name: "docker without a daemon", env: map[string]string{"PGTX_TEST_SERVER": "docker"}, ping: errRefused,
			want: "", wantPing: true, wantNote: "PGTX_TEST_SERVER=docker, and no Docker daemon answered (connection refused)"},
		{name: "local over docker", env: map[string]string{"PGTX_TEST_SERVER": " local "}, want: KindLocal},
		{name: "local without binaries", env: map[string]string{"PGTX_TEST_SERVER": "local"}, binErr: errors.New("no binaries"),
			want: "", wantNote: "PGTX_TEST_SERVER=local, and no binaries"},
		{name: "env", env: map[string]string{"PGTX_TEST_SERVER": "env", "DATABASE_URL": dsn}, want: KindEnv},
		{name: "env unset", env: map[string]string{"PGTX_TEST_SERVER": "env"},
			want: "", wantNote: "PGTX_TEST_SERVER=env, and PGTX_TEST_DATABASE_URL and DATABASE_URL are not set"},
		{name: "unknown kind", env: map[string]string{"PGTX_TEST_SERVER": "podman"},
			want: "", wantNote: "PGTX_TEST_SERVER=podman is none of env, docker, local"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pinged := false
			p := choose(context.Background(), probe{
				getenv:      kittest.FakeEnv(tc.env),
				dockerPing:  func(context.Context) error { pinged = true; return tc.ping },
				pingTimeout: time.Second,
				findBindir:  func() (string, error) { return "/bin", tc.binErr },
			})
			if p.kind != tc.want || pinged != tc.wantPing || p.forced == "" {
				t.Errorf("kind %q, pinged %v, forced %q; want %q, %v, forced", p.kind, pinged, p.forced, tc.want, tc.wantPing)
			}
			if tc.want != "" {
				return
			}
			fail, msg := missingServer(kittest.FakeEnv(nil), p) // not CI
			if !fail || !strings.Contains(msg, tc.wantNote) || !strings.Contains(msg, "a failure, not a skip") {
				t.Errorf("missingServer = %v, %q; want a failure that says %q", fail, msg, tc.wantNote)
			}
			if run, fail, _ := dedicatedVerdict(kittest.FakeEnv(nil), p, false); run || !fail {
				t.Errorf("dedicatedVerdict = run %v, fail %v; want a failure", run, fail)
			}
		})
	}
}

func TestDockerImage(t *testing.T) {
	t.Parallel()
	if got := dockerImage(kittest.FakeEnv(nil)); got != defaultDockerImage {
		t.Errorf("default image %q, want %q", got, defaultDockerImage)
	}
	if got := dockerImage(kittest.FakeEnv(map[string]string{"PGTX_TEST_IMAGE": " pgtx-local/postgres:15 "})); got != "pgtx-local/postgres:15" {
		t.Errorf("PGTX_TEST_IMAGE: image %q", got)
	}
}

// needDocker skips the test unless this binary's shared server is a Docker
// container: the kit's Docker path is then what the tests use, and its image is at
// hand. (A daemon that answers with an image that cannot be pulled makes the
// shared server local, and these tests skip.) With PGTX_TEST_SERVER=docker and no
// container, Shared fails the test.
func needDocker(t *testing.T) {
	t.Helper()
	if p := selected(); p.kind != KindDocker {
		if p.forced == KindDocker {
			Shared(t) // fails: PGTX_TEST_SERVER=docker and no daemon
		}
		t.Skipf("this test of the Docker path runs when the shared server is a Docker container; it is not (%s)",
			strings.Join(append(p.notes, p.describe()), "; "))
	}
	if s := Shared(t); s.Kind() != KindDocker {
		t.Skipf("this test of the Docker path runs when the shared server is a Docker container; a Docker daemon "+
			"answered but the %s container did not start, and the shared server is %s at %s (PGTX_TEST_VERBOSE=true "+
			"shows testcontainers' log)", dockerImage(os.Getenv), s.Kind(), s.Addr())
	}
}

// listed is a container as the daemon lists it.
type listed struct{ id, image, session string }

// listContainers lists the containers, stopped ones included, that match a filter
// of the daemon's: "id" with an id, or "label" with name=value.
func listContainers(t *testing.T, filter, value string) []listed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add(filter, value)})
	if err != nil {
		t.Fatal(err)
	}
	var out []listed
	for _, c := range list.Items {
		out = append(out, listed{id: c.ID, image: c.Image, session: c.Labels[dockerSessionLabel]})
	}
	return out
}

// A Docker server runs the configured image, is reached on 127.0.0.1 when the
// daemon is local, takes queries, and Stop removes its container and ends its reaper.
func TestDockerServerLifecycle(t *testing.T) {
	t.Parallel()
	needDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), dockerStartTimeout)
	defer cancel()
	start := time.Now()
	s, err := startDocker(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	v, ok := dockerContainers.Load(s)
	if !ok {
		t.Fatal("no container recorded for the server")
	}
	c := v.(dockerContainer)
	t.Logf("docker server at %s%s, ready in %v", s.Addr(), dockerNote(s), time.Since(start).Round(time.Millisecond))

	if got, want := s.String(), "Docker container "+shortID(c.id)+" (image "+c.image+") at "+s.Addr(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if c.image != dockerImage(os.Getenv) {
		t.Errorf("image %q, want %q", c.image, dockerImage(os.Getenv))
	}
	host, _, _ := net.SplitHostPort(s.Addr())
	if _, set := os.LookupEnv("TESTCONTAINERS_HOST_OVERRIDE"); !set && localDaemon(ctx) && host != "127.0.0.1" {
		t.Errorf("address %s: the daemon is local, want 127.0.0.1", s.Addr())
	}
	got := listContainers(t, "id", c.id)
	if len(got) != 1 || got[0].image != c.image || got[0].session == "" {
		t.Fatalf("containers with id %s: %+v; want one, of image %s, labelled %s", shortID(c.id), got, c.image, dockerSessionLabel)
	}
	session := got[0].session

	conn, err := pgx.Connect(ctx, s.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Errorf("SELECT 1 = %d, %v", one, err)
	}
	if err := conn.Close(ctx); err != nil {
		t.Error(err)
	}

	stopStart := time.Now()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped in %v", time.Since(stopStart).Round(time.Millisecond))
	if got := listContainers(t, "id", c.id); len(got) != 0 {
		t.Errorf("after Stop, container %s remains: %+v", shortID(c.id), got)
	}
	if got := listContainers(t, "label", dockerSessionLabel+"="+session); len(got) != 0 {
		t.Errorf("after Stop, the session's containers remain: %+v", got)
	}
	if dockerNote(s) != "" {
		t.Errorf("after Stop, dockerNote = %q", dockerNote(s))
	}
}

// reaperHelperEnv makes TestDockerReaperHelper, in a child test binary, start a
// Docker server, print its container's id, then end as the variable says.
const reaperHelperEnv = "PGTXTEST_REAPER_HELPER"

func TestDockerReaperHelper(t *testing.T) {
	how := os.Getenv(reaperHelperEnv)
	if how == "" {
		t.Skip("run by TestDockerReaperRemovesContainers in a child test binary")
	}
	s, err := startDocker(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	v, _ := dockerContainers.Load(s)
	os.Stdout.WriteString("container " + v.(dockerContainer).id + "\n")
	switch how {
	case "panic":
		panic("pgtxtest: a test panics with a Docker server running")
	case "exit":
		os.Exit(3)
	case "hang":
		select {} // killed by the parent
	}
}

// However a test binary ends without stopping its Docker server — a panic, os.Exit
// past Main, SIGKILL — its reaper removes the container, and does so before the
// binary's output closes (so before go test returns). TESTCONTAINERS_RYUK_DISABLED
// is set in the child: the kit's reaper alone does it.
func TestDockerReaperRemovesContainers(t *testing.T) {
	t.Parallel()
	needDocker(t)
	for _, how := range []string{"panic", "exit", "hang"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), dockerStartTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDockerReaperHelper$", "-test.count=1")
			cmd.Env = append(os.Environ(), reaperHelperEnv+"="+how, "TESTCONTAINERS_RYUK_DISABLED=true")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			id := ""
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if rest, ok := strings.CutPrefix(sc.Text(), "container "); ok {
					id = rest
					if how == "hang" {
						_ = cmd.Process.Signal(syscall.SIGKILL)
					}
				}
			}
			err = cmd.Wait() // returns once the reaper, which shares the child's stderr, has exited
			if id == "" {
				t.Fatalf("the child printed no container id (%v):\n%s", err, stderr.String())
			}
			if got := listContainers(t, "id", id); len(got) != 0 {
				t.Errorf("after the child ended (%v), its container remains: %+v\n%s", err, got, stderr.String())
			}
			if !strings.Contains(stderr.String(), "removed "+shortID(id)) {
				t.Errorf("the reaper did not report removing %s:\n%s", shortID(id), stderr.String())
			}
			t.Logf("child ended with %v; container %s removed by the reaper", err, shortID(id))
		})
	}
}
