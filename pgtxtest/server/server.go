package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/lifecycle"
)

// The kinds of server the harness can provide.
const (
	KindEnv    = "env"    // a server named by PGTX_TEST_DATABASE_URL or DATABASE_URL
	KindDocker = "docker" // a container started with testcontainers-go
	KindLocal  = "local"  // a cluster started from the local PostgreSQL binaries
)

// stopTimeout bounds how long Stop waits for a server to go away.
const stopTimeout = 30 * time.Second

// Server is a running Postgres that tests can connect to.
//
// Its methods are safe for concurrent use.
type Server struct {
	kind string
	base *url.URL // the DSN of the default (admin) database
	addr string   // host:port, "" when the server is reached over a Unix socket

	local     *localCluster               // set for KindLocal
	stopExtra func(context.Context) error // set for KindDocker
	fellBack  string                      // why the planned Docker container was not used, if it was not

	mu      sync.Mutex // serializes Stop, Restart, Crash, Start and Promote
	stopped bool
	stopErr error
}

// Kind tells where the server comes from: "env", "docker" or "local".
func (s *Server) Kind() string { return s.kind }

// DSN returns a URL connection string for the named database on the server, in the
// form postgres://user@host:port/database?sslmode=disable for docker and local
// servers. An empty name means the server's default (admin) database. For an env
// server, the URL keeps everything of the configured DSN except its database. A
// Server not made by this package has no DSN: "".
func (s *Server) DSN(database string) string {
	if s.base == nil {
		return ""
	}
	u := cloneURL(s.base)
	if database != "" {
		u.Path = "/" + database
		u.RawPath = ""
		q := u.Query()
		if q.Has("dbname") || q.Has("database") {
			q.Del("dbname")
			q.Del("database")
			u.RawQuery = q.Encode()
		}
	}
	return u.String()
}

// Addr returns the server's host:port, for example to put a fault proxy in front of
// it. It is empty when the server is reached over a Unix socket.
func (s *Server) Addr() string { return s.addr }

// String says what and where the server is, for a program to tell its user:
// "local server at 127.0.0.1:5433 (data directory ..., binaries ...)",
// "Docker container 0123456789ab (image ...) at 127.0.0.1:32768" or "env
// server at db.example:5432". It holds no DSN, so no password.
func (s *Server) String() string {
	where := s.addr
	if where == "" {
		where = "a Unix socket"
	}
	switch {
	case s.local != nil:
		return fmt.Sprintf("local server at %s (data directory %s, binaries %s)", where, s.local.dataDir(), s.local.bindir)
	case s.kind == KindDocker:
		if v, ok := dockerContainers.Load(s); ok {
			c := v.(dockerContainer)
			return fmt.Sprintf("Docker container %s (image %s) at %s", shortID(c.id), c.image, where)
		}
	}
	return fmt.Sprintf("%s server at %s", s.kind, where)
}

// LogPath returns the path of a local server's log file, or "" for other kinds. The
// file is removed by Stop.
func (s *Server) LogPath() string {
	if s.local == nil {
		return ""
	}
	return s.local.logPath()
}

// Stop stops the server and removes what it left on disk. It is idempotent: later
// calls return the result of the first. Stopping an env server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return s.stopErr
	}
	s.stopped = true
	lifecycle.Unregister(s)

	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	switch {
	case s.local != nil:
		s.stopErr = s.local.destroy(ctx)
	case s.stopExtra != nil:
		s.stopErr = s.stopExtra(ctx)
	}
	if s.stopErr != nil {
		s.stopErr = fmt.Errorf("pgtxtest: stop %s server at %s: %w", s.kind, s.addr, s.stopErr)
	}
	return s.stopErr
}

// Restart stops a local server with a fast shutdown (SIGINT, which ends every session
// with 57P01), waits for downtime, then starts it again on the same port with the
// same data directory, and waits until it accepts connections. It returns an error
// for servers of other kinds, for a stopped server, for a negative downtime, and if
// another process took the port during the downtime. If
// ctx ends first, Restart returns an error that wraps ctx's error and the server may
// be left down; Stop still cleans it up.
func (s *Server) Restart(ctx context.Context, downtime time.Duration) error {
	if s.local == nil {
		return fmt.Errorf("pgtxtest: Restart needs a local server, this one is %q", s.kind)
	}
	if downtime < 0 {
		return fmt.Errorf("pgtxtest: Restart: negative downtime %v", downtime)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("pgtxtest: Restart: the server is stopped")
	}
	if err := s.local.restart(ctx, downtime); err != nil {
		return fmt.Errorf("pgtxtest: restart server at %s: %w", s.addr, err)
	}
	return nil
}

// Crash stops a local server abruptly, as a crash would: an immediate shutdown
// (SIGQUIT to the postmaster, which ends every session without a checkpoint), and
// waits until the postmaster has exited. The data directory is kept: [Server.Start]
// brings the server back on the same port, after crash recovery, and Stop still
// cleans it up. It returns an error for servers of other kinds and for a server that
// is stopped or already down. Crash waits at most 30 seconds, less if ctx ends first;
// a server that outlives that is killed.
func (s *Server) Crash(ctx context.Context) error {
	if s.local == nil {
		return fmt.Errorf("pgtxtest: Crash needs a local server, this one is %q", s.kind)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return errors.New("pgtxtest: Crash: the server is stopped")
	case s.local.proc == nil:
		return errors.New("pgtxtest: Crash: the server is already down")
	}
	if err := s.local.crash(ctx); err != nil {
		return fmt.Errorf("pgtxtest: crash server at %s: %w", s.addr, err)
	}
	return nil
}

// Start starts a local server that [Server.Crash] took down, on the same port with
// the same data directory, and waits until it accepts connections (a standby comes
// back in recovery and resumes streaming). It returns an error for servers of other
// kinds, for a stopped server, for one that is running, and if another process took
// the port meanwhile. If ctx ends first the server may be left down; Stop still
// cleans it up.
func (s *Server) Start(ctx context.Context) error {
	if s.local == nil {
		return fmt.Errorf("pgtxtest: Start needs a local server, this one is %q", s.kind)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return errors.New("pgtxtest: Start: the server is stopped")
	case s.local.proc != nil:
		return errors.New("pgtxtest: Start: the server is running")
	}
	if err := s.local.start(ctx); err != nil {
		return fmt.Errorf("pgtxtest: start server at %s: %w", s.addr, err)
	}
	return nil
}

// newServer builds a Server reached at the given URL DSN and registers it, so that
// Main stops it if its owner does not.
func newServer(kind string, base *url.URL) *Server {
	s := &Server{kind: kind, base: cloneURL(base), addr: urlAddr(base)}
	lifecycle.Register(s)
	return s
}

// urlAddr returns the first host:port of a URL DSN, or "" for a Unix socket.
func urlAddr(u *url.URL) string {
	host := u.Host
	if h := u.Query().Get("host"); h != "" {
		host = h
	}
	host, _, _ = strings.Cut(host, ",")
	if host == "" || strings.HasPrefix(host, "/") {
		return ""
	}
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	port := u.Query().Get("port")
	port, _, _ = strings.Cut(port, ",")
	if port == "" {
		port = "5432"
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), port)
}

func cloneURL(u *url.URL) *url.URL {
	c := *u
	if u.User != nil {
		user := *u.User
		c.User = &user
	}
	return &c
}

// DSNWithAddr returns dsn, a URL DSN such as one from [Server.DSN] or pgtxtest.NewDatabase,
// with its host and port replaced by addr (host:port), for example the address of a
// fault proxy. Everything else, the database and the options included, is kept.
func DSNWithAddr(dsn, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("pgtxtest: DSNWithAddr: address %q: %w", addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("pgtxtest: DSNWithAddr: port of %q: %w", addr, err)
	}
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("pgtxtest: DSNWithAddr: %q is not a postgres:// URL", redact(dsn))
	}
	u.Host = net.JoinHostPort(host, port)
	if q := u.Query(); q.Has("host") || q.Has("port") {
		q.Del("host")
		q.Del("port")
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// redact hides the password of a URL DSN, for error messages.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return u.Redacted()
}
