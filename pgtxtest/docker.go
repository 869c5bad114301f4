package pgtxtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/modules/postgres"
)

const (
	dockerImage        = "postgres:15-alpine"
	dockerPingTimeout  = 2 * time.Second
	dockerStartTimeout = 3 * time.Minute // includes pulling the image
)

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
// It bounds the provider lookup itself, which testcontainers' Run does not.
func dockerPing(ctx context.Context) error {
	quietDocker.Do(func() { tclog.SetDefault(dockerLogger()) })
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("pgtxtest: docker client: %w", err)
	}
	defer cli.Close()
	dockerUsed.Store(true)
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("pgtxtest: docker ping: %w", err)
	}
	return nil
}

// startDocker runs a Postgres container and returns it as a Server.
func startDocker(ctx context.Context) (*Server, error) {
	ctx, cancel := context.WithTimeout(ctx, dockerStartTimeout)
	defer cancel()
	ctr, err := postgres.Run(ctx, dockerImage,
		testcontainers.WithLogger(dockerLogger()),
		testcontainers.WithCmdArgs(
			"-c", "synchronous_commit=off",
			"-c", "full_page_writes=off",
			"-c", "max_connections="+defaultMaxConns,
		),
		postgres.BasicWaitStrategies(),
	)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("pgtxtest: start %s container: %w", dockerImage, err), terminate(ctr))
	}
	dsn, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("pgtxtest: address of the %s container: %w", dockerImage, err), terminate(ctr))
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("pgtxtest: address of the %s container: %w", dockerImage, err), terminate(ctr))
	}
	s := newServer(KindDocker, u)
	s.stopExtra = func(ctx context.Context) error { return ctr.Terminate(ctx) }
	return s, nil
}

// terminate removes a container that could not be used; ctr may be nil.
func terminate(ctr *postgres.PostgresContainer) error {
	if ctr == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := ctr.Terminate(ctx); err != nil {
		return fmt.Errorf("pgtxtest: remove container: %w", err)
	}
	return nil
}
