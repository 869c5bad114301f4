// Package proc runs the programs the kit starts (postgres, pgbouncer, pgpool, pg_autoctl):
// their processes, environment, directories, ports and logs.
package proc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

const (
	KillGrace     = 10 * time.Second // after SIGKILL, for the process to be reaped
	StartAttempts = 3                // ports taken by someone else are retried on a new port
	Superuser     = "postgres"       // the role of the servers the kit starts
)

// ErrPortTaken reports that another process took the port a program was started on.
var ErrPortTaken = errors.New("port already in use")

// IsCI reports whether the tests run in CI, where a missing server is a failure.
func IsCI(getenv func(string) string) bool {
	ci, _ := strconv.ParseBool(getenv("CI"))
	return ci
}

// FreePort returns a TCP port of 127.0.0.1 that is free now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtxtest: find a free port: %w", err)
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("pgtxtest: find a free port: unexpected address %v", l.Addr())
	}
	return addr.Port, nil
}

// BaseDir is where cluster directories go: PGTX_TEST_CLUSTER_DIR if set, else
// a memory-backed directory if there is one with room, else os.TempDir().
func BaseDir() string {
	if dir := os.Getenv("PGTX_TEST_CLUSTER_DIR"); dir != "" {
		return dir
	}
	if dir, ok := FastDir(); ok {
		return dir
	}
	return os.TempDir()
}

// LogSize is the size of the log file now, where the lines of what follows begin.
func LogSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// WaitPostgres polls the server until a connection succeeds, the process exits or
// timeout passes. The server that answers must be the one with dataDir: another
// may have taken the port first.
func WaitPostgres(ctx context.Context, dsn, dataDir string, p *Process, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return p.WaitReady(ctx, "server", func(ctx context.Context) (bool, error) {
		attemptCtx, attemptCancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgconn.Connect(attemptCtx, dsn)
		attemptCancel()
		if err != nil {
			return true, err
		}
		res := conn.ExecParams(ctx, "SELECT current_setting('data_directory')", nil, nil, nil, nil).Read()
		err = errors.Join(res.Err, conn.Close(ctx))
		switch {
		case err != nil:
			return false, fmt.Errorf("first query: %w", err)
		case len(res.Rows) != 1 || len(res.Rows[0]) != 1:
			return false, fmt.Errorf("first query: %d rows", len(res.Rows))
		case filepath.Clean(string(res.Rows[0][0])) != filepath.Clean(dataDir):
			return false, fmt.Errorf("%w: a server with data directory %s answers", ErrPortTaken, res.Rows[0][0])
		}
		return false, nil
	})
}
