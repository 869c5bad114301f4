package bouncer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

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
			e := newBouncerEnv(t, Config{Mode: tc.mode, DefaultPoolSize: tc.poolSize})
			ctx := testContext(t)
			cfg := bouncerConnConfig(t, e.via)
			a, b := kittest.ConnectConfig(t, ctx, cfg), kittest.ConnectConfig(t, ctx, cfg)
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
	e := newBouncerEnv(t, Config{MaxClientConn: maxConns})
	ctx := testContext(t)
	cfg := bouncerConnConfig(t, e.via)
	for range maxConns {
		kittest.ExecOK(t, ctx, kittest.ConnectConfig(t, ctx, cfg), "select 1")
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
	e := newBouncerEnv(t, Config{QueryWaitTimeout: time.Second, DefaultPoolSize: 1})
	ctx := testContext(t)
	cfg := bouncerConnConfig(t, e.via)
	holder := kittest.ConnectConfig(t, ctx, cfg)
	waiter := kittest.ConnectConfig(t, ctx, cfg) // logs in while the pool's server is free
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

func TestBouncerBadOptions(t *testing.T) {
	t.Parallel()
	srv := server.Shared(t)
	tests := []struct {
		name    string
		s       *server.Server
		opts    Config
		wantMsg string
	}{
		{"no server", nil, Config{}, "needs a server"},
		{"server without DSN", &server.Server{}, Config{}, "needs a server"},
		{"unknown mode", srv, Config{Mode: "statment"}, `Mode "statment"`},
		{"negative pool size", srv, Config{DefaultPoolSize: -1}, "DefaultPoolSize -1 is negative"},
		{"negative max_client_conn", srv, Config{MaxClientConn: -5}, "MaxClientConn -5 is negative"},
		{"negative query_wait_timeout", srv, Config{QueryWaitTimeout: -time.Second}, "QueryWaitTimeout -1s is negative"},
		{"negative server_login_retry", srv, Config{ServerLoginRetry: -1}, "ServerLoginRetry -1ns is negative"},
		{"startup parameter list", srv, Config{IgnoreStartupParameters: []string{"options,search_path"}}, "invalid parameter name"},
		{"empty startup parameter", srv, Config{IgnoreStartupParameters: []string{""}}, "invalid parameter name"},
		{"extra name with a space", srv, Config{Extra: map[string]string{"pool mode": "x"}}, "invalid setting name"},
		{"extra value with a newline", srv, Config{Extra: map[string]string{"admin_users": "x\n[databases]"}}, "line break"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := startBouncer(context.Background(), "/nonexistent/pgbouncer", tc.s, tc.opts)
			if err == nil {
				_ = b.Stop()
				t.Fatal("startBouncer succeeded")
			}
			kittest.CheckConfigError(t, err, tc.wantMsg, tc.s != nil && tc.s.DSN("") != "")
		})
	}
}

func TestBouncerConfigText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts Config
		want []string // lines of the [pgbouncer] section
		last string   // the last line
	}{
		{"defaults", Config{}, []string{
			"pool_mode = transaction", "default_pool_size = 4", "max_client_conn = 100",
			"query_wait_timeout = 5", "server_login_retry = 1", "server_check_delay = 0",
			"ignore_startup_parameters = extra_float_digits", "server_reset_query = ",
			"auth_type = trust", "auth_user = postgres", "admin_users = postgres", "unix_socket_dir = ",
			"listen_addr = 127.0.0.1", "listen_port = 6543", "log_connections = 1", "log_disconnections = 1",
		}, "log_disconnections = 1"},
		{"set", Config{
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
			text := cfg.iniText("/d", 6543, proc.Superuser, "127.0.0.1", "5432")
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
