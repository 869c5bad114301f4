package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/moby/moby/client"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/lifecycle"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
)

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
	lifecycle.MarkDockerUsed()
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
