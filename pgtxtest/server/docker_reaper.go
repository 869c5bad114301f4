package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
)

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
