package pgtxtest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// The Docker server: a container of the official postgres image, or of the image
// named by PGTX_TEST_IMAGE, which must behave as the official one does (its
// POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB, `postgres -c name=value`
// arguments, port 5432, and "database system is ready to accept connections"
// logged twice on a first start). CI runs .ci/postgres-image's, built from Debian
// packages, as no image registry is reachable there.
//
// The kit removes its containers itself, whether or not testcontainers' reaper
// (Ryuk) runs: Stop does, Main does at the end of the test binary, and a helper
// process removes them when the binary dies without either (a panic, os.Exit, a
// -timeout, SIGKILL). TESTCONTAINERS_RYUK_DISABLED=true, for a daemon that cannot
// pull Ryuk's image, leaves nothing behind.
const (
	defaultDockerImage = "postgres:15-alpine" // the official image
	dockerImageEnv     = "PGTX_TEST_IMAGE"    // overrides it, e.g. pgtx-local/postgres:15
	dockerPingTimeout  = 2 * time.Second
	dockerStartTimeout = 3 * time.Minute  // includes pulling the image
	dockerReadyTimeout = 2 * time.Minute  // from the container's start to its second ready line
	dockerReachTimeout = 30 * time.Second // then until a connection through the published port logs in
	dockerStopTimeout  = 10 * time.Second // SIGINT (a fast shutdown), then SIGKILL
	dockerLogTail      = 40               // lines of the container's log in a start error

	// dockerSessionLabel labels each container with the session of its reaper.
	dockerSessionLabel = "org.pgtx-go.pgtxtest.session"
	// reaperEnv, set to a session, makes the test binary a reaper (see init).
	reaperEnv     = "PGTXTEST_DOCKER_REAPER"
	reaperTimeout = time.Minute // for the reaper's removal of the containers
)

// dockerImage returns the image of the Docker server: PGTX_TEST_IMAGE, else the
// official image.
func dockerImage(getenv func(string) string) string {
	if img := strings.TrimSpace(getenv(dockerImageEnv)); img != "" {
		return img
	}
	return defaultDockerImage
}

// dockerLogger is what testcontainers-go logs to: nothing, unless PGTX_TEST_VERBOSE
// is true, so that a machine without Docker runs the tests quietly.
func dockerLogger() tclog.Logger {
	if v, _ := strconv.ParseBool(os.Getenv("PGTX_TEST_VERBOSE")); v {
		return tclog.Default()
	}
	return tclog.NewNoopLogger()
}

// quietDocker sets testcontainers' default logger, once: it is a global that
// testcontainers reads without a lock.
var quietDocker sync.Once

// dockerPing reports whether a Docker daemon answers within the context's deadline.
// It bounds the provider lookup itself, which testcontainers' Run does not. Its
// error says where a daemon was looked for (see noDockerDaemon); the harness writes
// it after "no Docker daemon answered".
func dockerPing(ctx context.Context) error {
	quietDocker.Do(func() { tclog.SetDefault(dockerLogger()) })
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return noDockerDaemon(machineDockerPlaces(), err)
	}
	defer cli.Close()
	dockerUsed.Store(true)
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("at %s: %w", cli.DaemonHost(), err)
	}
	return nil
}

// The places where testcontainers looks for a Docker daemon, after tc.host in
// ~/.testcontainers.properties: DOCKER_HOST, then the default socket, then the
// sockets of a rootless daemon (dockerd-rootless.sh runs one as the user).
const (
	dockerDefaultSocket = "/var/run/docker.sock"
	dockerRootlessTool  = "dockerd-rootless.sh"
)

// dockerPlaces is what the machine says about where a Docker daemon would answer:
// the seams of noDockerDaemon.
type dockerPlaces struct {
	getenv   func(string) string
	exists   func(path string) bool
	lookPath func(file string) (string, error)
	uid      int
	home     string
}

// machineDockerPlaces returns this machine's dockerPlaces.
func machineDockerPlaces() dockerPlaces {
	home, _ := os.UserHomeDir()
	return dockerPlaces{
		getenv:   os.Getenv,
		exists:   func(path string) bool { _, err := os.Stat(path); return err == nil },
		lookPath: exec.LookPath,
		uid:      os.Getuid(),
		home:     home,
	}
}

// rootlessSockets returns the sockets of a rootless daemon, in testcontainers'
// order.
func (d dockerPlaces) rootlessSockets() []string {
	var socks []string
	if dir := d.getenv("XDG_RUNTIME_DIR"); dir != "" {
		socks = append(socks, dir+"/docker.sock")
	}
	if d.home != "" {
		socks = append(socks, d.home+"/.docker/run/docker.sock", d.home+"/.docker/desktop/docker.sock")
	}
	return append(socks, "/run/user/"+strconv.Itoa(d.uid)+"/docker.sock")
}

// noDockerDaemon turns the error of testcontainers' search for a daemon into one
// that says where it looked. testcontainers ends its search with the rootless
// sockets and reports "rootless Docker not found" when none of the places had a
// daemon, which reads as if a rootless setup were what is missing when there is
// simply no daemon; that is said only when a rootless Docker is installed and not
// running, or its socket does not answer.
func noDockerDaemon(d dockerPlaces, err error) error {
	cause := searchCause(err)
	at := func(where string) error {
		if cause == "" {
			return errors.New("at " + where)
		}
		return errors.New("at " + where + ": " + cause)
	}
	if host := d.getenv("DOCKER_HOST"); host != "" {
		return at("DOCKER_HOST=" + host)
	}
	if d.exists(dockerDefaultSocket) {
		return at("the default socket " + dockerDefaultSocket)
	}
	socks := d.rootlessSockets()
	for _, sock := range socks {
		if d.exists(sock) {
			return at("the rootless socket " + sock)
		}
	}
	msg := "DOCKER_HOST is not set and there is no socket at " + dockerDefaultSocket
	if tool, lerr := d.lookPath(dockerRootlessTool); lerr == nil {
		msg += "; rootless Docker is installed (" + tool + ") and not running: there is no socket at " + socks[0] +
			" (start it: systemctl --user start docker)"
	}
	if cause != "" {
		msg += " (" + cause + ")"
	}
	return errors.New(msg)
}

// searchCause returns the errors of testcontainers' search for a daemon, on one
// line, without its closing "rootless Docker not found" (the places it names are
// said by noDockerDaemon).
func searchCause(err error) string {
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	var parts []string
	for _, e := range errs {
		if e == nil || e.Error() == "rootless Docker not found" {
			continue
		}
		parts = append(parts, strings.Join(strings.Fields(strings.ReplaceAll(e.Error(), "\n", "; ")), " "))
	}
	return strings.Join(parts, "; ")
}

// dockerContainers holds the container behind each running Docker server.
var dockerContainers sync.Map // *Server → dockerContainer

type dockerContainer struct{ id, image string }

// dockerNote returns ", container <id>, image <image>" for a running Docker
// server, for the log line of Shared, and "" for any other.
func dockerNote(s *Server) string {
	if v, ok := dockerContainers.Load(s); ok {
		c := v.(dockerContainer)
		return fmt.Sprintf(", container %s, image %s", shortID(c.id), c.image)
	}
	return ""
}

// startDocker runs a Postgres container and returns it as a Server, reached through
// the port Docker publishes for 5432 (see dockerURL).
func startDocker(ctx context.Context) (*Server, error) {
	quietDocker.Do(func() { tclog.SetDefault(dockerLogger()) })
	image := dockerImage(os.Getenv)
	ctx, cancel := context.WithTimeout(ctx, dockerStartTimeout)
	defer cancel()

	// The reaper first: it removes the container if this binary dies from here on.
	r, err := startReaper()
	if err != nil {
		return nil, err
	}
	ctr, err := postgres.Run(ctx, image,
		testcontainers.WithLogger(dockerLogger()),
		testcontainers.WithLabels(map[string]string{dockerSessionLabel: r.session}),
		testcontainers.WithCmdArgs(
			"-c", "synchronous_commit=off",
			"-c", "full_page_writes=off",
			"-c", "max_connections="+defaultMaxConns,
		),
		// The first half of postgres.BasicWaitStrategies: the official image
		// starts the server twice, the first time to initialise it. Its second
		// half, a dial of the published port at testcontainers' idea of the host,
		// is dockerURL's, which tries 127.0.0.1 first.
		testcontainers.WithWaitStrategyAndDeadline(dockerReadyTimeout,
			wait.ForLog("database system is ready to accept connections").WithOccurrence(2)),
	)
	fail := func(what string, err error) (*Server, error) {
		err = fmt.Errorf("pgtxtest: %s the %s container: %w%s", what, image, err, containerLogTail(ctr))
		return nil, errors.Join(err, terminate(ctr), r.stop())
	}
	if err != nil {
		return fail("start", err)
	}
	u, err := dockerURL(ctx, ctr)
	if err != nil {
		return fail("connect to", err)
	}
	s := newServer(KindDocker, u)
	dockerContainers.Store(s, dockerContainer{id: ctr.GetContainerID(), image: image})
	s.stopExtra = func(ctx context.Context) error {
		dockerContainers.Delete(s)
		return errors.Join(terminateCtx(ctx, ctr), r.stop())
	}
	return s, nil
}

// dockerURL returns the URL of the container's server: its user, password and
// database as testcontainers gives them, at the first address where the server
// answers (a connection that logs in) within dockerReachTimeout. The port is the one
// Docker publishes for 5432. The host is 127.0.0.1 first, when the daemon is on
// this machine (a Unix socket): the traffic then goes through the published port on
// the loopback interface. The other is testcontainers' idea of the daemon's host:
// "localhost", or the gateway of Docker's bridge network when this process looks
// like it runs in a container (a /.dockerenv), where testcontainers falls back to
// the default route's gateway if the bridge network names none, as Docker 20.10's
// does — another machine. TESTCONTAINERS_HOST_OVERRIDE, when set, is the only host
// tried.
func dockerURL(ctx context.Context, ctr *postgres.PostgresContainer) (*url.URL, error) {
	dsn, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, err
	}
	port, err := ctr.MappedPort(ctx, "5432/tcp")
	if err != nil {
		return nil, err
	}
	tcHost, _, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, err
	}
	var hosts []string
	if _, set := os.LookupEnv("TESTCONTAINERS_HOST_OVERRIDE"); !set && localDaemon(ctx) {
		hosts = append(hosts, "127.0.0.1")
	}
	if tcHost != "localhost" && (len(hosts) == 0 || tcHost != hosts[0]) {
		hosts = append(hosts, tcHost)
	}
	if len(hosts) == 0 {
		hosts = append(hosts, "127.0.0.1")
	}

	ctx, cancel := context.WithTimeout(ctx, dockerReachTimeout)
	defer cancel()
	errs := make([]error, len(hosts))
	for {
		for i, h := range hosts {
			c := cloneURL(u)
			c.Host = net.JoinHostPort(h, port.Port())
			if errs[i] = pingServer(ctx, c); errs[i] == nil {
				return c, nil
			}
			errs[i] = fmt.Errorf("%s: %w", c.Host, errs[i])
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the published port %s answers at none of %v: %w", port.Port(), hosts, errors.Join(errs...))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// localDaemon reports whether testcontainers reaches the Docker daemon through a
// Unix socket, so that the ports it publishes are on this machine.
func localDaemon(ctx context.Context) bool {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return false
	}
	defer cli.Close()
	return strings.HasPrefix(cli.DaemonHost(), "unix://")
}

// pingServer connects to u and closes the connection, within two seconds.
func pingServer(ctx context.Context, u *url.URL) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, u.String())
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// containerLogTail returns the last lines of a container's log, to explain why it
// did not start; "" when there is no container or no log.
func containerLogTail(ctr *postgres.PostgresContainer) string {
	if ctr == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := ctr.Logs(ctx)
	if err != nil {
		return ""
	}
	defer rc.Close()
	var lines []string
	sc := bufio.NewScanner(rc)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > dockerLogTail {
			lines = lines[1:]
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return fmt.Sprintf("\n--- the last %d lines of container %s's log:\n%s\n---",
		len(lines), shortID(ctr.GetContainerID()), strings.Join(lines, "\n"))
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// terminate removes a container that could not be used; ctr may be nil.
func terminate(ctr *postgres.PostgresContainer) error {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	return terminateCtx(ctx, ctr)
}

// terminateCtx stops a container (SIGINT, SIGKILL after dockerStopTimeout) and
// removes it with its volumes; ctr may be nil.
func terminateCtx(ctx context.Context, ctr *postgres.PostgresContainer) error {
	if ctr == nil {
		return nil
	}
	if err := ctr.Terminate(ctx, testcontainers.StopTimeout(dockerStopTimeout)); err != nil {
		return fmt.Errorf("pgtxtest: remove container %s: %w", shortID(ctr.GetContainerID()), err)
	}
	return nil
}

// A reaper removes a Docker server's container when the test binary ends without
// doing it, however it ends. It is a copy of the test binary, started with
// reaperEnv set to a session, which init turns into runReaper: it waits until its
// stdin, a pipe whose other end only this process holds, reaches end of file — when
// this process closes it (reaper.stop) or exits, a panic, os.Exit, a test timeout
// or SIGKILL included — then removes the containers labelled with the session, and
// exits. It ignores SIGINT, SIGTERM and SIGHUP, which a terminal or a CI runner may
// send to the whole process group. Its stderr is the test binary's: it reports what
// it had to remove, and go test, which waits for that output to close, returns
// only when the containers are gone.
type reaper struct {
	session string
	cmd     *exec.Cmd
	w       *os.File // the write end of its stdin

	once sync.Once
	err  error
}

func startReaper() (*reaper, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("pgtxtest: the reaper of Docker containers: %w", err)
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("pgtxtest: the reaper of Docker containers: %w", err)
	}
	session := hex.EncodeToString(b[:])
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pgtxtest: the reaper of Docker containers: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), reaperEnv+"="+session)
	cmd.Stdin = pr
	cmd.Stderr = os.Stderr
	err = cmd.Start()
	_ = pr.Close() // the reaper's end
	if err != nil {
		_ = pw.Close()
		return nil, fmt.Errorf("pgtxtest: start the reaper of Docker containers: %w", err)
	}
	return &reaper{session: session, cmd: cmd, w: pw}, nil
}

// stop tells the reaper that the containers are gone, and waits for it to exit
// (it removes any that are not). It is idempotent.
func (r *reaper) stop() error {
	r.once.Do(func() {
		_ = r.w.Close()
		done := make(chan error, 1)
		go func() { done <- r.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				r.err = fmt.Errorf("pgtxtest: the reaper of Docker containers: %w", err)
			}
		case <-time.After(reaperTimeout + 10*time.Second):
			_ = r.cmd.Process.Kill()
			<-done
			r.err = errors.New("pgtxtest: the reaper of Docker containers did not exit: killed")
		}
	})
	return r.err
}

func init() {
	if session := os.Getenv(reaperEnv); session != "" {
		os.Exit(runReaper(session, os.Stdin, os.Stderr))
	}
}

// runReaper is the reaper's main: it waits for EOF on stdin, then removes the
// containers of session and returns the exit code.
func runReaper(session string, stdin io.Reader, stderr io.Writer) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	_, _ = io.Copy(io.Discard, stdin)

	tclog.SetDefault(tclog.NewNoopLogger())
	ctx, cancel := context.WithTimeout(context.Background(), reaperTimeout)
	defer cancel()
	removed, err := removeSession(ctx, session)
	for _, c := range removed {
		fmt.Fprintf(stderr, "pgtxtest: the test binary ended without removing its Docker container: removed %s\n", c)
	}
	if err != nil {
		fmt.Fprintf(stderr, "pgtxtest: reaper of session %s: %v\n", session, err)
		return 1
	}
	return 0
}

// removeSession removes, with their volumes, the containers labelled with
// session, and describes them.
func removeSession(ctx context.Context, session string) ([]string, error) {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", dockerSessionLabel+"="+session),
	})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var removed []string
	var errs []error
	for _, c := range list.Items {
		_, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !gone(err) {
			errs = append(errs, fmt.Errorf("remove container %s: %w", shortID(c.ID), err))
			continue
		}
		removed = append(removed, fmt.Sprintf("%s (image %s)", shortID(c.ID), c.Image))
	}
	return removed, errors.Join(errs...)
}

// gone reports whether a removal failed only because the container is gone, or
// going (testcontainers' Terminate may be removing it at the same time).
func gone(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "no such container") || strings.Contains(msg, "already in progress")
}

// serverKindEnv forces the kind of the shared server: env, docker or local. With it
// there is no fallback to another kind: when the one asked for cannot be had, every
// test that needs the server fails (CI=true or not), and so does a Docker server
// whose container does not start. CI uses PGTX_TEST_SERVER=docker to run the suite
// in a container although local binaries are installed.
const serverKindEnv = "PGTX_TEST_SERVER"

// chooseForced is choose when PGTX_TEST_SERVER is set to want.
func chooseForced(ctx context.Context, p probe, want string) plan {
	asked := serverKindEnv + "=" + want
	switch want {
	case KindEnv:
		for _, name := range envVars {
			if dsn := strings.TrimSpace(p.getenv(name)); dsn != "" {
				return plan{kind: KindEnv, envVar: name, dsn: dsn, forced: want}
			}
		}
		return plan{forced: want, notes: []string{asked + ", and " + strings.Join(envVars, " and ") + " are not set"}}
	case KindDocker:
		pingCtx, cancel := context.WithTimeout(ctx, p.pingTimeout)
		err := p.dockerPing(pingCtx)
		cancel()
		if err == nil {
			return plan{kind: KindDocker, forced: want, notes: []string{asked}}
		}
		return plan{forced: want, notes: []string{asked + ", and no Docker daemon answered (" + err.Error() + ")"}}
	case KindLocal:
		bindir, err := p.findBindir()
		if err == nil {
			return plan{kind: KindLocal, bindir: bindir, forced: want, notes: []string{asked}}
		}
		return plan{forced: want, notes: []string{asked + ", and " + err.Error()}}
	}
	return plan{forced: want, notes: []string{asked + " is none of " + KindEnv + ", " + KindDocker + ", " + KindLocal}}
}
