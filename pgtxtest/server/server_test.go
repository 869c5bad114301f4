package server

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/lifecycle"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/pgbin"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

func TestServerSharedAcceptsQueries(t *testing.T) {
	t.Parallel()
	s := Shared(t)
	if s != Shared(t) {
		t.Error("Shared returned two servers")
	}
	switch s.Kind() {
	case KindEnv, KindDocker, KindLocal:
	default:
		t.Errorf("Kind() = %q", s.Kind())
	}
	conn := kittest.Connect(t, s.DSN(""))
	if got := kittest.QueryString(t, conn, "SELECT (1 + 1)::text"); got != "2" {
		t.Errorf("SELECT 1 + 1 = %q", got)
	}
	if s.Kind() == KindLocal {
		for setting, want := range map[string]string{"fsync": "off", "max_connections": defaultMaxConns, "listen_addresses": "127.0.0.1"} {
			if got := kittest.QueryString(t, conn, "SELECT current_setting($1)", setting); got != want {
				t.Errorf("%s = %q, want %q", setting, got, want)
			}
		}
	}
	if _, _, err := net.SplitHostPort(s.Addr()); s.Kind() != KindEnv && err != nil {
		t.Errorf("Addr() = %q: %v", s.Addr(), err)
	}
}

func TestServerDSN(t *testing.T) {
	t.Parallel()
	local := &Server{kind: KindLocal, base: (&localCluster{port: 5433}).dsn()}
	env, err := url.Parse("postgres://u:p%40ss@db.example:6432/app?sslmode=require&dbname=app&application_name=x")
	if err != nil {
		t.Fatal(err)
	}
	envServer := &Server{kind: KindEnv, base: env}
	tests := []struct {
		name    string
		s       *Server
		db      string
		want    string
		wantDB  string
		wantApp string
	}{
		{name: "local admin", s: local, want: "postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable", wantDB: "postgres"},
		{name: "local named", s: local, db: "pgtx_t_1", want: "postgres://postgres@127.0.0.1:5433/pgtx_t_1?sslmode=disable", wantDB: "pgtx_t_1"},
		{name: "name that needs escaping", s: local, db: "a b/c?d", wantDB: "a b/c?d"},
		{name: "env admin keeps everything", s: envServer, want: env.String(), wantDB: "app", wantApp: "x"},
		{name: "env named drops dbname parameter", s: envServer, db: "other", wantDB: "other", wantApp: "x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dsn := tc.s.DSN(tc.db)
			if tc.want != "" && dsn != tc.want {
				t.Errorf("DSN(%q) = %q, want %q", tc.db, dsn, tc.want)
			}
			cfg, err := pgconn.ParseConfig(dsn)
			if err != nil {
				t.Fatalf("DSN(%q) = %q does not parse: %v", tc.db, dsn, err)
			}
			if cfg.Database != tc.wantDB || cfg.RuntimeParams["application_name"] != tc.wantApp {
				t.Errorf("DSN(%q) = %q: database %q application_name %q, want %q %q",
					tc.db, dsn, cfg.Database, cfg.RuntimeParams["application_name"], tc.wantDB, tc.wantApp)
			}
		})
	}
	if got := (&Server{kind: KindEnv, base: env, addr: urlAddr(env)}).String(); got != "env server at db.example:6432" {
		t.Errorf("env server: String() = %q, want %q", got, "env server at db.example:6432")
	}
	if got := (&Server{}).DSN("x"); got != "" {
		t.Errorf("zero Server: DSN = %q, want \"\"", got)
	}
	if got := local.DSN(""); got != "postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable" {
		t.Errorf("after DSN(name) calls, DSN(\"\") = %q", got)
	}
}

func TestServerAddrOfURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ url, want string }{
		{"postgres://u@h:6432/db", "h:6432"},
		{"postgres://u@h/db", "h:5432"},
		{"postgres://u@[::1]:6432/db", "[::1]:6432"},
		{"postgres://u@a:1,b:2/db", "a:1"},
		{"postgres:///db?host=/var/run/postgresql", ""},
		{"postgres:///db?host=h&port=7", "h:7"},
	}
	for _, tc := range tests {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := urlAddr(u); got != tc.want {
			t.Errorf("urlAddr(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}

func TestServerDSNWithAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dsn, addr, want string
		wantErr         bool
	}{
		{dsn: "postgres://u@127.0.0.1:5432/db?sslmode=disable&options=-csearch_path%3Ds", addr: "127.0.0.1:6000",
			want: "postgres://u@127.0.0.1:6000/db?sslmode=disable&options=-csearch_path%3Ds"},
		{dsn: "postgres:///db?host=/tmp&port=1", addr: "[::1]:7", want: "postgres://[::1]:7/db"},
		{dsn: "postgres://u@h/db", addr: "no-port", wantErr: true},
		{dsn: "postgres://u@h/db", addr: "h:99999", wantErr: true},
		{dsn: "host=h dbname=db", addr: "h:1", wantErr: true},
	}
	for _, tc := range tests {
		got, err := DSNWithAddr(tc.dsn, tc.addr)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("DSNWithAddr(%q, %q) = %q, %v; want %q, error %v", tc.dsn, tc.addr, got, err, tc.want, tc.wantErr)
		}
	}
}

// startLocalForTest starts a local cluster directly (not through New, so the
// test sees the internals), skipping like New does where it cannot.
func startLocalForTest(t *testing.T, settings map[string]string) *Server {
	t.Helper()
	bindir, err := pgbin.Find()
	if run, fail, msg := dedicatedVerdict(os.Getenv, selected(), err == nil); fail {
		t.Fatal(msg)
	} else if !run {
		t.Skip(msg)
	}
	s, err := startLocal(context.Background(), bindir, settings, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestLocalClusterLifecycle(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := startLocalForTest(t, nil)
	t.Logf("local cluster started in %v (copy of the template, postgres up, first connection)", time.Since(start))

	conn := kittest.Connect(t, s.DSN(""))
	if got := kittest.QueryString(t, conn, "SELECT current_user::text"); got != "postgres" {
		t.Errorf("current_user = %q", got)
	}
	c := s.local
	if os.Geteuid() == 0 {
		st, err := os.Stat(c.dataDir())
		if err != nil {
			t.Fatal(err)
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); !ok || sys.Uid != c.cred.Uid {
			t.Errorf("data directory owned by %v, want the postgres user (uid %d)", st.Sys(), c.cred.Uid)
		}
	}
	if _, err := os.Stat(s.LogPath()); err != nil {
		t.Errorf("log: %v", err)
	}
	if got, want := s.String(), "local server at "+s.Addr()+" (data directory "+c.dataDir()+", binaries "+c.bindir+")"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	proc := c.proc

	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-proc.Done: // the reaping goroutine has ended
	default:
		t.Error("Stop returned before the server process was reaped")
	}
	if _, err := os.Stat(c.root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster directory %s still there after Stop: %v", c.root, err)
	}
	if conn, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after Stop", s.Addr())
	}
	if lifecycle.Live(s) {
		t.Error("a stopped server is still registered for Main")
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := s.Restart(context.Background(), 0); err == nil {
		t.Error("Restart of a stopped server succeeded")
	}
}

func TestLocalInvalidSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		settings map[string]string
		wantErr  bool
	}{
		{settings: map[string]string{"max_connections": "8", "auto_explain.log_min_duration": "0"}},
		{settings: map[string]string{"max connections": "8"}, wantErr: true},
		{settings: map[string]string{"fsync=on -c x": "1"}, wantErr: true},
		{settings: map[string]string{"": "1"}, wantErr: true},
		{settings: map[string]string{"work_mem": "1\x00"}, wantErr: true},
	}
	for _, tc := range tests {
		if err := proc.ValidateSettings(tc.settings); (err != nil) != tc.wantErr {
			t.Errorf("proc.ValidateSettings(%q) = %v, want error %v", tc.settings, err, tc.wantErr)
		}
	}
	if got := strings.Join(proc.SettingArgs(map[string]string{"b": "2", "a": "1"}), " "); got != "-c a=1 -c b=2" {
		t.Errorf("settingArgs = %q", got)
	}
}

func TestDedicatedAppliesSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		settings map[string]string
		want     map[string]string
	}{
		{name: "defaults", want: map[string]string{"max_connections": defaultMaxConns, "fsync": "off", "synchronous_commit": "off"}},
		{name: "max_connections", settings: map[string]string{"max_connections": "8"}, want: map[string]string{"max_connections": "8"}},
		{
			name:     "several",
			settings: map[string]string{"work_mem": "1234kB", "statement_timeout": "5s", "fsync": "on"},
			want:     map[string]string{"work_mem": "1234kB", "statement_timeout": "5s", "fsync": "on"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := New(t, &Config{Settings: tc.settings})
			if s.Kind() != KindLocal {
				t.Errorf("Kind() = %q", s.Kind())
			}
			conn := kittest.Connect(t, s.DSN(""))
			for name, want := range tc.want {
				if got := kittest.QueryString(t, conn, "SHOW "+pgx.Identifier{name}.Sanitize()); got != want {
					t.Errorf("SHOW %s = %q, want %q", name, got, want)
				}
			}
		})
	}
}

// TestDedicatedOwnSystem: the harness's servers are copies of one template,
// one system to PostgreSQL; OwnSystem gives a server a system identifier of
// its own.
func TestDedicatedOwnSystem(t *testing.T) {
	t.Parallel()
	systemOf := func(s *Server) string {
		return kittest.QueryString(t, kittest.Connect(t, s.DSN("")), "select system_identifier::text from pg_control_system()")
	}
	a, b := systemOf(New(t, nil)), systemOf(New(t, nil))
	own := systemOf(New(t, &Config{OwnSystem: true}))
	if a != b {
		t.Errorf("two copies of the template: systems %s and %s, want one", a, b)
	}
	if own == a {
		t.Errorf("OwnSystem: system %s, the template's", own)
	}
}

func TestRestartKeepsPortAndData(t *testing.T) {
	t.Parallel()
	s := New(t, nil)
	dsn := s.DSN("")
	addr := s.Addr()
	before := kittest.Connect(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := before.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('still here')"); err != nil {
		t.Fatal(err)
	}

	// Restart in the background with a long downtime, and see the server go away.
	const downtime = 2 * time.Second
	restarted := make(chan error, 1)
	start := time.Now()
	go func() { restarted <- s.Restart(ctx, downtime) }()
	sawDown := false
	for deadline := time.Now().Add(downtime); time.Now().Before(deadline) && !sawDown; {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			sawDown = true
			break
		}
		c.Close()
		time.Sleep(10 * time.Millisecond) // polling, bounded by deadline
	}
	if err := <-restarted; err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Logf("restart with %v downtime took %v", downtime, time.Since(start))
	if !sawDown {
		t.Error("the server never stopped accepting connections during Restart")
	}
	if time.Since(start) < downtime {
		t.Errorf("Restart returned after %v, before its downtime %v", time.Since(start), downtime)
	}
	if s.Addr() != addr {
		t.Errorf("Addr() = %q after Restart, was %q", s.Addr(), addr)
	}

	if _, err := before.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("a connection from before the restart still works")
	}
	after := kittest.Connect(t, dsn)
	if got := kittest.QueryString(t, after, "SELECT v FROM kept"); got != "still here" {
		t.Errorf("after Restart, kept.v = %q", got)
	}
}

func TestRestartErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		s        *Server
		downtime time.Duration
		want     string
	}{
		{name: "env server", s: &Server{kind: KindEnv}, want: "local server"},
		{name: "docker server", s: &Server{kind: KindDocker}, want: "local server"},
		{name: "negative downtime", s: &Server{kind: KindLocal, local: &localCluster{}}, downtime: -time.Second, want: "negative"},
		{name: "stopped", s: &Server{kind: KindLocal, local: &localCluster{}, stopped: true}, want: "stopped"},
	}
	for _, tc := range tests {
		err := tc.s.Restart(context.Background(), tc.downtime)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Restart = %v, want an error about %q", tc.name, err, tc.want)
		}
	}

	t.Run("context ends during downtime", func(t *testing.T) {
		t.Parallel()
		s := New(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := s.Restart(ctx, time.Minute)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Restart = %v, want context.DeadlineExceeded", err)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("Restart took %v after its context ended", took)
		}
	})
}

func BenchmarkLocalClusterStart(b *testing.B) {
	bindir, err := pgbin.Find()
	if err != nil {
		b.Skip(err)
	}
	for b.Loop() {
		s, err := startLocal(context.Background(), bindir, nil, false)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := s.Stop(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
