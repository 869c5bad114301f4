package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// bouncerTestTimeout bounds the database work of one bouncer test.
const bouncerTestTimeout = 60 * time.Second

// bouncerEnv is a fresh database on the shared server and a PgBouncer in front of
// the server.
type bouncerEnv struct {
	b   *Bouncer
	db  string // the database's name
	via string // the database's DSN through the bouncer
}

// newBouncerEnv creates a database on the shared server and starts a bouncer with
// opts in front of the server.
func newBouncerEnv(t *testing.T, opts BouncerOptions) *bouncerEnv {
	t.Helper()
	s := Shared(t)
	dsn := NewDatabaseOn(t, s)
	b := StartBouncer(t, s, opts)
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	via, err := DSNWithAddr(dsn, b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return &bouncerEnv{b: b, db: cfg.Database, via: via}
}

// bouncerContext returns a context that bounds a test's database work.
func bouncerContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bouncerTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// bouncerConnConfig parses dsn for exactly one plain-text connection that uses only
// the simple protocol: in transaction mode, the extended protocol's several
// round trips per statement may land on different server connections.
func bouncerConnConfig(t *testing.T, dsn string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	cfg.TLSConfig = nil
	cfg.Fallbacks = nil
	cfg.ConnectTimeout = 15 * time.Second
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return cfg
}

// bouncerConnect opens a connection that is closed when the test ends.
func bouncerConnect(t *testing.T, ctx context.Context, cfg *pgx.ConnConfig) *pgx.Conn {
	t.Helper()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect through the bouncer: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// bouncerExec runs sql and fails the test on error.
func bouncerExec(t *testing.T, ctx context.Context, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// backendPID returns the pid of the server backend that runs c's next statement.
func backendPID(t *testing.T, ctx context.Context, c *pgx.Conn) int {
	t.Helper()
	var pid int
	if err := c.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatalf("select pg_backend_pid(): %v", err)
	}
	return pid
}

// adminShow runs a SHOW command on the bouncer's admin console and returns its
// rows as column name to value.
func adminShow(t *testing.T, ctx context.Context, b *Bouncer, command string) []map[string]string {
	t.Helper()
	conn, err := pgconn.Connect(ctx, b.AdminDSN())
	if err != nil {
		t.Fatalf("connect to the admin console: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	res, err := conn.Exec(ctx, command).ReadAll()
	if err != nil || len(res) != 1 {
		t.Fatalf("%s: %d results, error %v", command, len(res), err)
	}
	var rows []map[string]string
	for _, r := range res[0].Rows {
		row := make(map[string]string, len(r))
		for i, f := range res[0].FieldDescriptions {
			row[f.Name] = string(r[i])
		}
		rows = append(rows, row)
	}
	return rows
}

// requireBouncerError fails the test unless err is the FATAL error PgBouncer
// sends when it closes a client, with SQLSTATE 08P01 and message msg.
func requireBouncerError(t *testing.T, what string, err error, msg string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		t.Fatalf("%s: got %v, want PgBouncer's FATAL %q", what, err, msg)
	}
	if pgErr.Code != "08P01" || pgErr.Severity != "FATAL" || pgErr.Message != msg {
		t.Fatalf("%s: got %s %s %q, want FATAL 08P01 %q", what, pgErr.Severity, pgErr.Code, pgErr.Message, msg)
	}
}

func TestBouncerQuery(t *testing.T) {
	t.Parallel()
	for _, mode := range []PoolMode{PoolTransaction, PoolSession} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newBouncerEnv(t, BouncerOptions{Mode: mode})
			ctx := bouncerContext(t)
			c := bouncerConnect(t, ctx, bouncerConnConfig(t, e.via))
			var db string
			if err := c.QueryRow(ctx, "select current_database()").Scan(&db); err != nil {
				t.Fatalf("select current_database(): %v", err)
			}
			if db != e.db {
				t.Errorf("current_database() = %q through the bouncer, want %q", db, e.db)
			}
			bouncerExec(t, ctx, c, "create table t (id int)")
			tx, err := c.Begin(ctx)
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			if _, err := tx.Exec(ctx, "insert into t values (1), (2)"); err != nil {
				t.Fatalf("insert: %v", err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("commit: %v", err)
			}
			var n int
			if err := c.QueryRow(ctx, "select count(*) from t").Scan(&n); err != nil || n != 2 {
				t.Fatalf("count = %d, %v; want 2", n, err)
			}

			found := false
			for _, row := range adminShow(t, ctx, e.b, "SHOW POOLS") {
				if row["database"] == e.db {
					found = true
					if row["pool_mode"] != string(mode) || row["cl_active"] != "1" {
						t.Errorf("SHOW POOLS row %v: want pool_mode %s and one active client", row, mode)
					}
				}
			}
			if !found {
				t.Errorf("SHOW POOLS has no row for database %s", e.db)
			}
		})
	}
}

func TestBouncerAdmin(t *testing.T) {
	t.Parallel()
	e := newBouncerEnv(t, BouncerOptions{})
	ctx := bouncerContext(t)
	for _, cmd := range []string{"SHOW POOLS", "SHOW DATABASES", "RELOAD", "RECONNECT " + e.db, "PAUSE " + e.db, "RESUME " + e.db} {
		if err := e.b.Admin(ctx, cmd); err != nil {
			t.Errorf("Admin(%q): %v", cmd, err)
		}
	}
	err := e.b.Admin(ctx, "NO SUCH COMMAND")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !strings.Contains(err.Error(), "pgtest: pgbouncer admin command") {
		t.Errorf("Admin of a bad command = %v, want the console's error, wrapped", err)
	}
	if cfg := adminShow(t, ctx, e.b, "SHOW CONFIG"); len(cfg) == 0 {
		t.Error("SHOW CONFIG through AdminDSN returned no rows")
	}
	c := bouncerConnect(t, ctx, bouncerConnConfig(t, e.via))
	bouncerExec(t, ctx, c, "select 1")
	log, err := os.ReadFile(e.b.LogPath())
	if err != nil {
		t.Fatalf("read the log: %v", err)
	}
	if want := "login attempt: db=" + e.db; !strings.Contains(string(log), want) {
		t.Errorf("the log has no %q:\n%s", want, log)
	}
}

func TestBouncerAnyRole(t *testing.T) {
	t.Parallel()
	s := Shared(t)
	if s.Kind() != KindLocal {
		t.Skipf("the %s server may ask roles for a password; a role without one works only on a local (trust) server", s.Kind())
	}
	e := newBouncerEnv(t, BouncerOptions{})
	ctx := bouncerContext(t)
	random := make([]byte, 4)
	_, _ = rand.Read(random)
	role := "pgtx_bouncer_role_" + hex.EncodeToString(random)
	admin := connect(t, s.DSN(""))
	if _, err := admin.Exec(ctx, "create role "+role+" login"); err != nil {
		t.Fatalf("create role: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "drop role "+role); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	cfg := bouncerConnConfig(t, e.via)
	cfg.User = role
	c := bouncerConnect(t, ctx, cfg)
	var user string
	if err := c.QueryRow(ctx, "select current_user").Scan(&user); err != nil || user != role {
		t.Fatalf("current_user = %q, %v; want %q", user, err, role)
	}

	cfg.User = role + "_missing"
	if c, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		_ = c.Close(ctx)
		t.Fatal("a role that does not exist connected through the bouncer")
	}
}

func TestBouncerPoolSharing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode     PoolMode
		poolSize int
		wantSame bool
	}{
		{PoolTransaction, 1, true},
		{PoolSession, 2, false},
	}
	for _, tc := range tests {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()
			e := newBouncerEnv(t, BouncerOptions{Mode: tc.mode, DefaultPoolSize: tc.poolSize})
			ctx := bouncerContext(t)
			cfg := bouncerConnConfig(t, e.via)
			a, b := bouncerConnect(t, ctx, cfg), bouncerConnect(t, ctx, cfg)
			pidA, pidB := backendPID(t, ctx, a), backendPID(t, ctx, b)
			if same := pidA == pidB; same != tc.wantSame {
				t.Errorf("backend pids %d and %d: same %v, want %v", pidA, pidB, same, tc.wantSame)
			}
		})
	}
}

func TestBouncerMaxClientConn(t *testing.T) {
	t.Parallel()
	const maxConns = 2
	e := newBouncerEnv(t, BouncerOptions{MaxClientConn: maxConns})
	ctx := bouncerContext(t)
	cfg := bouncerConnConfig(t, e.via)
	for range maxConns {
		bouncerExec(t, ctx, bouncerConnect(t, ctx, cfg), "select 1")
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		_ = c.Close(ctx)
	}
	requireBouncerError(t, "connection beyond max_client_conn", err, "no more connections allowed (max_client_conn)")
	// The admin console is not limited.
	if err := e.b.Admin(ctx, "SHOW CLIENTS"); err != nil {
		t.Errorf("admin console at max_client_conn: %v", err)
	}
}

func TestBouncerQueryWaitTimeout(t *testing.T) {
	t.Parallel()
	e := newBouncerEnv(t, BouncerOptions{QueryWaitTimeout: time.Second, DefaultPoolSize: 1})
	ctx := bouncerContext(t)
	cfg := bouncerConnConfig(t, e.via)
	holder := bouncerConnect(t, ctx, cfg)
	waiter := bouncerConnect(t, ctx, cfg) // logs in while the pool's server is free
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if _, err := tx.Exec(ctx, "select 1"); err != nil { // holds the only server connection
		t.Fatalf("select in the transaction: %v", err)
	}
	start := time.Now()
	_, err = waiter.Exec(ctx, "select 1")
	requireBouncerError(t, "query waiting for a server", err, "query_wait_timeout")
	if took := time.Since(start); took < time.Second {
		t.Errorf("query_wait_timeout after %v, want at least 1s", took)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Errorf("commit of the holder: %v", err)
	}
}

func TestBouncerKill(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		running bool // a statement is running when KILL comes, else the client idles in its transaction
	}{
		{"idle in transaction", false},
		{"statement running", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newBouncerEnv(t, BouncerOptions{})
			ctx := bouncerContext(t)
			cfg := bouncerConnConfig(t, e.via)
			started := make(chan struct{}, 1)
			cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
				if n.Message == "started" {
					select {
					case started <- struct{}{}:
					default:
					}
				}
			}
			c := bouncerConnect(t, ctx, cfg)
			bouncerExec(t, ctx, c, "begin")
			bouncerExec(t, ctx, c, "select 1")
			done := make(chan error, 1)
			if tc.running {
				go func() {
					_, err := c.Exec(ctx, "do $$ begin raise notice 'started'; perform pg_sleep(60); end $$")
					done <- err
				}()
				select {
				case <-started:
				case err := <-done:
					t.Fatalf("statement ended early: %v", err)
				}
			}

			if err := e.b.Admin(ctx, "KILL "+e.db); err != nil {
				t.Fatalf("KILL: %v", err)
			}
			var err error
			if tc.running {
				err = <-done
			} else {
				// Reads what PgBouncer sends the idle client, without writing first.
				err = c.PgConn().WaitForNotification(ctx)
			}
			requireBouncerError(t, "client of the killed database", err, "database removed")

			// PgBouncer 1.18 holds new clients of a killed database until RESUME.
			connected := make(chan error, 1)
			go func() {
				c, err := pgx.ConnectConfig(ctx, cfg)
				if err == nil {
					_, err = c.Exec(ctx, "select 1")
					err = errors.Join(err, c.Close(ctx))
				}
				connected <- err
			}()
			hold := time.NewTimer(300 * time.Millisecond)
			defer hold.Stop()
			select {
			case err := <-connected:
				t.Fatalf("a new client of the killed database went through before RESUME (error %v)", err)
			case <-hold.C:
			}
			if err := e.b.Admin(ctx, "RESUME "+e.db); err != nil {
				t.Fatalf("RESUME: %v", err)
			}
			if err := <-connected; err != nil {
				t.Fatalf("new client after RESUME: %v", err)
			}
		})
	}
}

func TestBouncerStop(t *testing.T) {
	t.Parallel()
	e := newBouncerEnv(t, BouncerOptions{Mode: PoolSession})
	ctx := bouncerContext(t)
	c := bouncerConnect(t, ctx, bouncerConnConfig(t, e.via))
	bouncerExec(t, ctx, c, "begin")
	bouncerExec(t, ctx, c, "select 1")
	pid := e.b.proc.cmd.Process.Pid

	start := time.Now()
	if err := e.b.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Stop with a client in a transaction took %v", took)
	}
	if err := e.b.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pgbouncer (pid %d) still exists after Stop: kill(0) = %v", pid, err)
	}
	if _, err := os.Stat(e.b.dir); !os.IsNotExist(err) {
		t.Errorf("directory %s after Stop: %v, want it removed", e.b.dir, err)
	}
	ln, err := net.Listen("tcp", e.b.Addr())
	if err != nil {
		t.Fatalf("port of the stopped bouncer: %v", err)
	}
	_ = ln.Close()
	if _, err := c.Exec(ctx, "select 1"); err == nil {
		t.Error("a client of the stopped bouncer still runs queries")
	}
}

func TestBouncerPortTaken(t *testing.T) {
	t.Parallel()
	s := Shared(t)
	bin, err := findBouncer(os.Getenv)
	if err != nil {
		t.Skip(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir, err := os.MkdirTemp(clusterBaseDir(), bouncerDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	b := &Bouncer{server: s, bin: bin, dir: dir, user: superuser, port: ln.Addr().(*net.TCPAddr).Port}
	if b.cred, err = serverCredential(); err != nil {
		t.Fatal(err)
	}
	if err := b.prepare(""); err != nil {
		t.Fatal(err)
	}
	cfg, err := BouncerOptions{}.config()
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(s.Addr())
	if err := b.writeConfig(cfg, host, port); err != nil {
		t.Fatal(err)
	}
	err = b.start(context.Background())
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("start on a taken port = %v, want errPortTaken", err)
	}
	if b.proc != nil {
		t.Error("the failed start left its process recorded")
	}
}

func TestBouncerBadOptions(t *testing.T) {
	t.Parallel()
	srv := &Server{kind: KindLocal, base: (&localCluster{port: 5432}).dsn(), addr: "127.0.0.1:5432"}
	tests := []struct {
		name    string
		s       *Server
		opts    BouncerOptions
		wantMsg string
	}{
		{"no server", nil, BouncerOptions{}, "needs a server"},
		{"server without DSN", &Server{}, BouncerOptions{}, "needs a server"},
		{"unknown mode", srv, BouncerOptions{Mode: "statment"}, `Mode "statment"`},
		{"negative pool size", srv, BouncerOptions{DefaultPoolSize: -1}, "DefaultPoolSize -1 is negative"},
		{"negative max_client_conn", srv, BouncerOptions{MaxClientConn: -5}, "MaxClientConn -5 is negative"},
		{"negative query_wait_timeout", srv, BouncerOptions{QueryWaitTimeout: -time.Second}, "QueryWaitTimeout -1s is negative"},
		{"negative server_login_retry", srv, BouncerOptions{ServerLoginRetry: -1}, "ServerLoginRetry -1ns is negative"},
		{"startup parameter list", srv, BouncerOptions{IgnoreStartupParameters: []string{"options,search_path"}}, "invalid parameter name"},
		{"empty startup parameter", srv, BouncerOptions{IgnoreStartupParameters: []string{""}}, "invalid parameter name"},
		{"extra name with a space", srv, BouncerOptions{Extra: map[string]string{"pool mode": "x"}}, "invalid setting name"},
		{"extra value with a newline", srv, BouncerOptions{Extra: map[string]string{"admin_users": "x\n[databases]"}}, "line break"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := startBouncer(context.Background(), "/nonexistent/pgbouncer", tc.s, tc.opts)
			if err == nil {
				_ = b.Stop()
				t.Fatal("startBouncer succeeded")
			}
			if !strings.HasPrefix(err.Error(), "pgtest: ") || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %q, want one starting with \"pgtest: \" that says %q", err, tc.wantMsg)
			}
		})
	}
}

func TestBouncerConfigText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts BouncerOptions
		want []string // lines of the [pgbouncer] section
		last string   // the last line
	}{
		{"defaults", BouncerOptions{}, []string{
			"pool_mode = transaction", "default_pool_size = 4", "max_client_conn = 100",
			"query_wait_timeout = 5", "server_login_retry = 1", "server_check_delay = 0",
			"ignore_startup_parameters = extra_float_digits", "server_reset_query = ",
			"auth_type = trust", "auth_user = postgres", "admin_users = postgres", "unix_socket_dir = ",
			"listen_addr = 127.0.0.1", "listen_port = 6543", "log_connections = 1", "log_disconnections = 1",
		}, "log_disconnections = 1"},
		{"set", BouncerOptions{
			Mode: PoolSession, DefaultPoolSize: 1, MaxClientConn: 3,
			QueryWaitTimeout: 1500 * time.Millisecond, ServerLoginRetry: 250 * time.Millisecond,
			IgnoreStartupParameters: []string{"Extra_Float_Digits", "options"},
			Extra:                   map[string]string{"pool_mode": "statement", "client_idle_timeout": "7"},
		}, []string{
			"pool_mode = session", "default_pool_size = 1", "max_client_conn = 3",
			"query_wait_timeout = 2", "server_login_retry = 0.25",
			"ignore_startup_parameters = extra_float_digits,options", "server_reset_query = DISCARD ALL",
			"client_idle_timeout = 7",
		}, "pool_mode = statement"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := tc.opts.config()
			if err != nil {
				t.Fatal(err)
			}
			text := cfg.iniText("/d", 6543, superuser, "127.0.0.1", "5432")
			if !strings.HasPrefix(text, "[databases]\n* = host=127.0.0.1 port=5432\n\n[pgbouncer]\n") {
				t.Errorf("config does not start with the wildcard database:\n%s", text)
			}
			lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
			for _, want := range tc.want {
				if !strings.Contains(text, "\n"+want+"\n") {
					t.Errorf("config has no line %q:\n%s", want, text)
				}
			}
			if got := lines[len(lines)-1]; got != tc.last {
				t.Errorf("last line %q, want %q", got, tc.last)
			}
		})
	}
}

func TestBouncerSweepsDeadBinariesDirs(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dead := filepath.Join(base, bouncerDirPrefix+"999999999-1")
	mine := filepath.Join(base, bouncerDirPrefix+strconv.Itoa(os.Getpid())+"-1")
	cluster := filepath.Join(base, "pgtx-pgtest-cluster-999999999-1")
	for _, dir := range []string{dead, mine, cluster} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sweepStaleBouncers(base)
	for dir, wantGone := range map[string]bool{dead: true, mine: false, cluster: false} {
		_, err := os.Stat(dir)
		if gone := os.IsNotExist(err); gone != wantGone {
			t.Errorf("%s: removed %v, want %v", filepath.Base(dir), gone, wantGone)
		}
	}
}

func TestBouncerMissingBinary(t *testing.T) {
	t.Parallel()
	env := func(vars map[string]string) func(string) string {
		return func(name string) string { return vars[name] }
	}
	_, err := findBouncer(env(map[string]string{"PGTX_TEST_PGBOUNCER": "/nonexistent/pgbouncer"}))
	if err == nil || !strings.Contains(err.Error(), "PGTX_TEST_PGBOUNCER=/nonexistent/pgbouncer") {
		t.Fatalf("findBouncer with a bad PGTX_TEST_PGBOUNCER = %v", err)
	}
	for _, ci := range []string{"", "true"} {
		fail, msg := missingBouncer(env(map[string]string{"CI": ci}), err)
		if fail != (ci == "true") || !strings.Contains(msg, "apt-get install pgbouncer") || !strings.Contains(msg, "/nonexistent/pgbouncer") {
			t.Errorf("CI=%q: missingBouncer = %v, %q", ci, fail, msg)
		}
	}
}
