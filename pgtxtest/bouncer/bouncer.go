package bouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// Bounds of a PgBouncer's steps.
const (
	bouncerReadyTimeout = 15 * time.Second // from starting pgbouncer to a first query through it
	bouncerStopTimeout  = 10 * time.Second // after SIGTERM, before SIGKILL
	bouncerAdminTimeout = time.Minute      // one admin console command, connection included
	bouncerDirPrefix    = "pgtx-pgtest-bouncer-"
	bouncerDefaultPath  = "/usr/sbin/pgbouncer" // where the Debian package installs it
)

// PoolMode is a PgBouncer pool_mode.
type PoolMode string

// The pool modes New accepts.
const (
	PoolTransaction PoolMode = "transaction" // a server connection per transaction
	PoolSession     PoolMode = "session"     // a server connection per client connection
)

// Config configures a PgBouncer. Zero fields mean the defaults in brackets.
type Config struct {
	Mode             PoolMode      // pool_mode [PoolTransaction]
	DefaultPoolSize  int           // default_pool_size, server connections per database and user [4]
	MaxClientConn    int           // max_client_conn [100]
	QueryWaitTimeout time.Duration // query_wait_timeout, in whole seconds, rounded up [5s]
	ServerLoginRetry time.Duration // server_login_retry, in milliseconds, rounded up [1s]
	// IgnoreStartupParameters are startup parameters PgBouncer accepts and ignores
	// (ignore_startup_parameters); extra_float_digits is always among them. Without an
	// entry here, a client sending a parameter PgBouncer does not track, such as
	// options, is refused.
	IgnoreStartupParameters []string
	// Extra holds any other [pgbouncer] settings, name to value, written after the
	// harness's own and so overriding them. Overriding listen_addr, listen_port,
	// logfile or the auth and admin settings breaks New's readiness check
	// or the DSNs.
	Extra map[string]string
}

// Bouncer is a running PgBouncer in front of one Server, started by New.
//
// It listens on 127.0.0.1 only, forwards every database name to the server (a
// wildcard entry, so databases made with pgtxtest.NewDatabase work through it), and
// authenticates clients with trust: the server's user is in its auth file, and any
// other role is looked up on the server with an auth_query run as the server's user
// (so connecting as a role the test created works, as long as the server lets that
// role in without a password, as the harness's local servers do; the lookup takes
// a server connection from the pool of the server's user for that database). Server
// connections are checked with a query before every reuse (server_check_delay = 0),
// so a connection whose backend has died, for example after Server.Restart, is
// never handed to a client. Connections and disconnections are logged to LogPath.
//
// Its methods are safe for concurrent use.
type Bouncer struct {
	server  *server.Server
	bin     string
	dir     string
	user    string // the server's user: admin user and auth_user
	port    int
	cred    *syscall.Credential // nil when not root
	logFrom int64               // size of the output file when the current run started

	mu      sync.Mutex // serializes Stop
	proc    *proc.Process
	stopped bool
	stopErr error
}

// New starts a PgBouncer in front of s configured by cfg (nil: the defaults), waits until
// a query through it answers, and stops it in tb.Cleanup. Bad options, a server
// without a DSN, and a PgBouncer that does not start fail tb. When PgBouncer is not
// installed the test is skipped with how to install it, except under CI=true where
// that is a failure; it is looked for in PGTX_TEST_PGBOUNCER, then PATH, then
// /usr/sbin/pgbouncer. A server reached over a Unix socket skips the test (fails it
// under CI=true): PgBouncer is given the server's TCP address.
func New(tb testing.TB, s *server.Server, cfg *Config) *Bouncer {
	tb.Helper()
	if _, ok := serverUser(s); !ok {
		tb.Fatal(errNoServer)
		return nil
	}
	var opts Config
	if cfg != nil {
		opts = *cfg
	}
	if _, err := opts.config(); err != nil {
		tb.Fatal(err)
	}
	bin := pgbouncer.Need(tb)
	proc.NeedTCP(tb, s.Addr(), "bouncer.New")
	return proc.Started(tb, proc.StartAttempts*(bouncerReadyTimeout+bouncerStopTimeout+proc.KillGrace), func(ctx context.Context) (*Bouncer, error) {
		return startBouncer(ctx, bin, s, opts)
	})
}

// DSN returns a URL connection string for the named database through the bouncer:
// the server's DSN for that database (its user and query options included) with the
// bouncer's address. An empty name means the server's default database.
func (b *Bouncer) DSN(database string) string {
	dsn, err := server.DSNWithAddr(b.server.DSN(database), b.Addr())
	if err != nil {
		return "" // not reached: the server's DSN is a postgres:// URL, Addr a host:port
	}
	return dsn
}

// Addr returns the bouncer's address, 127.0.0.1:port.
func (b *Bouncer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// AdminDSN returns the DSN of the bouncer's admin console: database "pgbouncer" as
// its admin user, the server's user ("postgres" for the harness's own servers). The
// console speaks the simple query protocol only.
func (b *Bouncer) AdminDSN() string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(b.user),
		Host:     b.Addr(),
		Path:     "/pgbouncer",
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Admin runs one admin console command, such as "SHOW POOLS", "PAUSE db",
// "RESUME db", "KILL db", "RECONNECT db" or "RELOAD", over a new connection and
// returns its error. PgBouncer 1.18 keeps a database killed with KILL, like one
// paused with PAUSE, closed to new queries until "RESUME db". The command's rows,
// if any, are discarded. The wait is bounded by ctx and by a minute.
func (b *Bouncer) Admin(ctx context.Context, command string) error {
	if _, err := b.exec(ctx, b.AdminDSN(), command, bouncerAdminTimeout); err != nil {
		return fmt.Errorf("pgtxtest: pgbouncer admin command %q: %w", command, err)
	}
	return nil
}

// LogPath returns the path of the bouncer's log file (logfile), which
// log_connections and log_disconnections make record every client's login and
// logout. The file is removed by Stop.
func (b *Bouncer) LogPath() string { return filepath.Join(b.dir, "pgbouncer.log") }

// Stop stops the bouncer at once, closing every client and server connection,
// and removes its directory. It is idempotent: later calls return the result of
// the first. It sends SIGTERM, PgBouncer's immediate shutdown (SIGINT would wait
// for clients in a transaction to finish it), and SIGKILL if the process has not
// exited within ten seconds.
func (b *Bouncer) Stop() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return b.stopErr
	}
	b.stopped = true
	b.stopErr = errors.Join(b.stopProcess(), os.RemoveAll(b.dir))
	if b.stopErr != nil {
		b.stopErr = fmt.Errorf("pgtxtest: stop pgbouncer at %s: %w", b.Addr(), b.stopErr)
	}
	return b.stopErr
}
