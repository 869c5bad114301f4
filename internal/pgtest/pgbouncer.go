package pgtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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

// The pool modes StartBouncer accepts.
const (
	PoolTransaction PoolMode = "transaction" // a server connection per transaction
	PoolSession     PoolMode = "session"     // a server connection per client connection
)

// BouncerOptions configures a PgBouncer. Zero fields mean the defaults in brackets.
type BouncerOptions struct {
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
	// logfile or the auth and admin settings breaks StartBouncer's readiness check
	// or the DSNs.
	Extra map[string]string
}

// Bouncer is a running PgBouncer in front of one Server, started by StartBouncer.
//
// It listens on 127.0.0.1 only, forwards every database name to the server (a
// wildcard entry, so databases made with NewDatabaseOn work through it), and
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
	server  *Server
	bin     string
	dir     string
	user    string // the server's user: admin user and auth_user
	port    int
	cred    *syscall.Credential // nil when not root
	logFrom int64               // size of the output file when the current run started

	mu      sync.Mutex // serializes Stop
	proc    *serverProcess
	stopped bool
	stopErr error
}

// bouncerConfig is a validated BouncerOptions with the defaults filled in.
type bouncerConfig struct {
	mode             PoolMode
	poolSize         int
	maxClientConn    int
	queryWaitSeconds int64
	loginRetryMillis int64
	ignore           []string
	extra            map[string]string
}

// config validates o and fills in the defaults.
func (o BouncerOptions) config() (bouncerConfig, error) {
	c := bouncerConfig{
		mode:             o.Mode,
		poolSize:         o.DefaultPoolSize,
		maxClientConn:    o.MaxClientConn,
		queryWaitSeconds: 5,
		loginRetryMillis: 1000,
		ignore:           []string{"extra_float_digits"},
		extra:            o.Extra,
	}
	switch c.mode {
	case "":
		c.mode = PoolTransaction
	case PoolTransaction, PoolSession:
	default:
		return c, fmt.Errorf("pgtest: BouncerOptions.Mode %q: want %q or %q", o.Mode, PoolTransaction, PoolSession)
	}
	switch {
	case c.poolSize < 0:
		return c, fmt.Errorf("pgtest: BouncerOptions.DefaultPoolSize %d is negative", c.poolSize)
	case c.poolSize == 0:
		c.poolSize = 4
	}
	switch {
	case c.maxClientConn < 0:
		return c, fmt.Errorf("pgtest: BouncerOptions.MaxClientConn %d is negative", c.maxClientConn)
	case c.maxClientConn == 0:
		c.maxClientConn = 100
	}
	switch {
	case o.QueryWaitTimeout < 0:
		return c, fmt.Errorf("pgtest: BouncerOptions.QueryWaitTimeout %v is negative", o.QueryWaitTimeout)
	case o.QueryWaitTimeout > 0:
		c.queryWaitSeconds = ceilDiv(o.QueryWaitTimeout, time.Second)
	}
	switch {
	case o.ServerLoginRetry < 0:
		return c, fmt.Errorf("pgtest: BouncerOptions.ServerLoginRetry %v is negative", o.ServerLoginRetry)
	case o.ServerLoginRetry > 0:
		c.loginRetryMillis = ceilDiv(o.ServerLoginRetry, time.Millisecond)
	}
	for _, p := range o.IgnoreStartupParameters {
		if !settingName.MatchString(p) {
			return c, fmt.Errorf("pgtest: BouncerOptions.IgnoreStartupParameters: invalid parameter name %q", p)
		}
		if !containsFold(c.ignore, p) {
			c.ignore = append(c.ignore, p)
		}
	}
	for name, value := range o.Extra {
		if !settingName.MatchString(name) {
			return c, fmt.Errorf("pgtest: BouncerOptions.Extra: invalid setting name %q", name)
		}
		if strings.ContainsAny(value, "\x00\r\n") {
			return c, fmt.Errorf("pgtest: BouncerOptions.Extra: the value of %s contains a line break or NUL byte", name)
		}
	}
	return c, nil
}

// ceilDiv returns d/unit rounded up.
func ceilDiv(d, unit time.Duration) int64 {
	n := int64(d / unit)
	if d%unit != 0 && n < math.MaxInt64 {
		n++
	}
	return n
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// StartBouncer starts a PgBouncer in front of s with the given options, waits until
// a query through it answers, and stops it in tb.Cleanup. Bad options, a server
// without a DSN, and a PgBouncer that does not start fail tb. When PgBouncer is not
// installed the test is skipped with how to install it, except under CI=true where
// that is a failure; it is looked for in PGTX_TEST_PGBOUNCER, then PATH, then
// /usr/sbin/pgbouncer. A server reached over a Unix socket skips the test: PgBouncer
// is given the server's TCP address.
func StartBouncer(tb testing.TB, s *Server, opts BouncerOptions) *Bouncer {
	tb.Helper()
	if s == nil || s.base == nil {
		tb.Fatal("pgtest: StartBouncer needs a server from Shared or Dedicated")
		return nil
	}
	if _, err := opts.config(); err != nil {
		tb.Fatal(err)
	}
	bin, err := findBouncer(os.Getenv)
	if err != nil {
		if fail, msg := missingBouncer(os.Getenv, err); fail {
			tb.Fatal(msg)
		} else {
			tb.Skip(msg)
		}
	}
	if s.Addr() == "" {
		tb.Skip("pgtest: the test server is reached over a Unix socket; StartBouncer needs its TCP address")
	}
	ctx, cancel := context.WithTimeout(context.Background(), startAttempts*(bouncerReadyTimeout+bouncerStopTimeout+killGrace))
	defer cancel()
	b, err := startBouncer(ctx, bin, s, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := b.Stop(); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return b
}

// findBouncer returns the path of the pgbouncer binary.
func findBouncer(getenv func(string) string) (string, error) {
	if p := getenv("PGTX_TEST_PGBOUNCER"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("PGTX_TEST_PGBOUNCER=%s: %w", p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := exec.LookPath(bouncerDefaultPath); err != nil {
		return "", fmt.Errorf("pgbouncer is not in PATH or %s", bouncerDefaultPath)
	}
	return bouncerDefaultPath, nil
}

// missingBouncer tells what a test does when PgBouncer cannot be found: under
// CI=true it fails, elsewhere it is skipped; msg says how to install it.
func missingBouncer(getenv func(string) string, why error) (fail bool, msg string) {
	msg = "pgtest: this test needs PgBouncer (" + why.Error() + "). To run it, install it " +
		"(e.g. apt-get install pgbouncer) or set PGTX_TEST_PGBOUNCER to the path of the pgbouncer binary."
	if isCI(getenv) {
		return true, msg + " CI=true: a missing PgBouncer is a failure, not a skip."
	}
	return false, msg
}

// startBouncer is StartBouncer without the testing.TB: it validates opts, makes the
// directory and runs bin, retrying on a new port when the chosen one was taken.
func startBouncer(ctx context.Context, bin string, s *Server, opts BouncerOptions) (*Bouncer, error) {
	if s == nil || s.base == nil {
		return nil, errors.New("pgtest: StartBouncer needs a server from Shared or Dedicated")
	}
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	upHost, upPort, err := net.SplitHostPort(s.Addr())
	if err != nil {
		return nil, fmt.Errorf("pgtest: StartBouncer: server address %q: %w", s.Addr(), err)
	}
	user := s.base.User.Username()
	if user == "" {
		user = superuser
	}
	password, _ := s.base.User.Password()
	if strings.ContainsAny(user+password, "\x00\r\n") {
		return nil, errors.New("pgtest: StartBouncer: the server's user name or password contains a line break or NUL byte")
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	base := clusterBaseDir()
	sweepStaleBouncers(base)
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-", bouncerDirPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("pgtest: make pgbouncer directory: %w", err)
	}
	b := &Bouncer{server: s, bin: bin, dir: dir, user: user, cred: cred}
	if err := b.prepare(password); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	var startErr error
	for range startAttempts {
		if b.port, startErr = freePort(); startErr != nil {
			break
		}
		if startErr = b.writeConfig(cfg, upHost, upPort); startErr != nil {
			break
		}
		if startErr = b.start(ctx); !errors.Is(startErr, errPortTaken) {
			break
		}
	}
	if startErr != nil {
		return nil, errors.Join(startErr, os.RemoveAll(dir))
	}
	return b, nil
}

func (b *Bouncer) iniPath() string      { return filepath.Join(b.dir, "pgbouncer.ini") }
func (b *Bouncer) userlistPath() string { return filepath.Join(b.dir, "userlist.txt") }
func (b *Bouncer) outPath() string      { return filepath.Join(b.dir, "pgbouncer.out") }

// prepare writes the auth file and hands the directory to the server's user, who
// runs pgbouncer and so must be able to write its log and pid file there.
func (b *Bouncer) prepare(password string) error {
	list := quoteUserlist(b.user) + " " + quoteUserlist(password) + "\n"
	if err := os.WriteFile(b.userlistPath(), []byte(list), 0o600); err != nil {
		return fmt.Errorf("pgtest: write pgbouncer auth file: %w", err)
	}
	if b.cred != nil {
		for _, path := range []string{b.dir, b.userlistPath()} {
			if err := os.Chown(path, int(b.cred.Uid), int(b.cred.Gid)); err != nil {
				return fmt.Errorf("pgtest: hand %s to the postgres user: %w", path, err)
			}
		}
	}
	return nil
}

// quoteUserlist quotes a field of the auth file: in double quotes, with double
// quotes doubled.
func quoteUserlist(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// bouncerAuthQuery finds any role of the server, with no password: the bouncer's
// clients use trust, and so does the server for the roles a test creates.
const bouncerAuthQuery = "SELECT rolname::text, NULL::text FROM pg_catalog.pg_roles WHERE rolname = $1"

// iniText renders pgbouncer.ini for a bouncer in dir on port, in front of the
// server at upHost:upPort, whose user is user.
func (c bouncerConfig) iniText(dir string, port int, user, upHost, upPort string) string {
	var b strings.Builder
	line := func(name, value string) { fmt.Fprintf(&b, "%s = %s\n", name, value) }
	b.WriteString("[databases]\n")
	line("*", "host="+upHost+" port="+upPort)
	b.WriteString("\n[pgbouncer]\n")
	line("listen_addr", "127.0.0.1")
	line("listen_port", strconv.Itoa(port))
	line("unix_socket_dir", "")
	line("pidfile", filepath.Join(dir, "pgbouncer.pid"))
	line("logfile", filepath.Join(dir, "pgbouncer.log"))
	line("auth_type", "trust")
	line("auth_file", filepath.Join(dir, "userlist.txt"))
	line("auth_user", user)
	line("auth_query", bouncerAuthQuery)
	line("admin_users", user)
	line("stats_users", user)
	line("pool_mode", string(c.mode))
	line("default_pool_size", strconv.Itoa(c.poolSize))
	line("max_client_conn", strconv.Itoa(c.maxClientConn))
	line("query_wait_timeout", strconv.FormatInt(c.queryWaitSeconds, 10))
	line("server_login_retry", strconv.FormatFloat(float64(c.loginRetryMillis)/1000, 'f', -1, 64))
	line("server_check_delay", "0")
	line("ignore_startup_parameters", strings.Join(c.ignore, ","))
	if c.mode == PoolSession {
		line("server_reset_query", "DISCARD ALL")
	} else {
		line("server_reset_query", "")
	}
	line("server_tls_sslmode", "disable")
	line("log_connections", "1")
	line("log_disconnections", "1")
	names := make([]string, 0, len(c.extra))
	for name := range c.extra {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		line(name, c.extra[name])
	}
	return b.String()
}

// writeConfig writes pgbouncer.ini for the current port.
func (b *Bouncer) writeConfig(cfg bouncerConfig, upHost, upPort string) error {
	text := cfg.iniText(b.dir, b.port, b.user, upHost, upPort)
	if err := os.WriteFile(b.iniPath(), []byte(text), 0o644); err != nil {
		return fmt.Errorf("pgtest: write pgbouncer.ini: %w", err)
	}
	return nil
}

// start runs pgbouncer in the foreground on b.port and waits until it is ready.
func (b *Bouncer) start(ctx context.Context) error {
	out, err := os.OpenFile(b.outPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: open pgbouncer output: %w", err)
	}
	defer out.Close() // the child has its own copy of the descriptor
	if st, err := out.Stat(); err == nil {
		b.logFrom = st.Size()
	}
	cmd := exec.Command(b.bin, b.iniPath())
	cmd.Dir = b.dir
	cmd.Env = serverEnv()
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = serverSysProcAttr(b.cred)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start pgbouncer: %w", err)
	}
	p := &serverProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	b.proc = p

	if err := b.waitReady(ctx, p); err != nil {
		stopErr := b.stopProcess()
		logTail := tail(b.outPath(), b.logFrom, 4096)
		if strings.Contains(logTail, "Address already in use") {
			err = errors.Join(errPortTaken, err)
		}
		return errors.Join(fmt.Errorf("pgtest: pgbouncer on port %d did not start: %w\npgbouncer log:\n%s", b.port, err, logTail), stopErr)
	}
	return nil
}

// waitReady polls until the admin console shows that the pgbouncer on the port is
// this one and a query through it to the server's default database answers, or the
// process exits, or bouncerReadyTimeout passes.
func (b *Bouncer) waitReady(ctx context.Context, p *serverProcess) error {
	ctx, cancel := context.WithTimeout(ctx, bouncerReadyTimeout)
	defer cancel()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		err := b.probe(ctx)
		if err == nil || errors.Is(err, errPortTaken) {
			return err
		}
		select {
		case <-p.done:
			return fmt.Errorf("the pgbouncer process exited (%v)", p.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last error: %w)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// probe checks once that this pgbouncer answers on its port: its admin console
// reports its log file, and a query through it reaches the server.
func (b *Bouncer) probe(ctx context.Context) error {
	rows, err := b.exec(ctx, b.AdminDSN(), "SHOW CONFIG", time.Second)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return fmt.Errorf("%w: the admin console refused: %w", errPortTaken, err)
		}
		return err
	}
	logfile := ""
	for _, row := range rows {
		if len(row) >= 2 && string(row[0]) == "logfile" {
			logfile = string(row[1])
		}
	}
	if filepath.Clean(logfile) != filepath.Clean(b.LogPath()) {
		return fmt.Errorf("%w: a pgbouncer with logfile %q answers", errPortTaken, logfile)
	}
	_, err = b.exec(ctx, b.DSN(""), "SELECT 1", 5*time.Second)
	return err
}

// exec runs sql with the simple protocol over a new connection to dsn, bounded by
// timeout, and returns the rows of its last result.
func (b *Bouncer) exec(ctx context.Context, dsn, sql string, timeout time.Duration) ([][][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	results, err := conn.Exec(ctx, sql).ReadAll()
	closeCtx, closeCancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer closeCancel()
	err = errors.Join(err, conn.Close(closeCtx))
	if err != nil || len(results) == 0 {
		return nil, err
	}
	last := results[len(results)-1]
	return last.Rows, last.Err
}

// DSN returns a URL connection string for the named database through the bouncer:
// the server's DSN for that database (its user and query options included) with the
// bouncer's address. An empty name means the server's default database.
func (b *Bouncer) DSN(database string) string {
	dsn, err := DSNWithAddr(b.server.DSN(database), b.Addr())
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
		return fmt.Errorf("pgtest: pgbouncer admin command %q: %w", command, err)
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
		b.stopErr = fmt.Errorf("pgtest: stop pgbouncer at %s: %w", b.Addr(), b.stopErr)
	}
	return b.stopErr
}

// stopProcess sends SIGTERM and waits until pgbouncer has exited, sending SIGKILL if
// it does not within bouncerStopTimeout.
func (b *Bouncer) stopProcess() error {
	p := b.proc
	if p == nil {
		return nil
	}
	b.proc = nil
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // fails only if it has exited already
	timer := time.NewTimer(bouncerStopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	_ = p.cmd.Process.Kill()
	timer.Reset(killGrace)
	select {
	case <-p.done:
		return fmt.Errorf("pgbouncer ignored SIGTERM for %v and was killed", bouncerStopTimeout)
	case <-timer.C:
		return fmt.Errorf("pgbouncer (pid %d) survived SIGKILL for %v", p.cmd.Process.Pid, killGrace)
	}
}

// sweepStaleBouncers removes the bouncer directories in base of test binaries that
// died without cleaning up (their pgbouncers died with them, see serverSysProcAttr).
func sweepStaleBouncers(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), bouncerDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}
