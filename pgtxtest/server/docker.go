package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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
