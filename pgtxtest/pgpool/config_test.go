package pgpool

import (
	"context"
	"strings"
	"testing"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

func TestPgpoolConfigText(t *testing.T) {
	t.Parallel()
	params := confParams{
		dir: "/d", port: 6543, pcpPort: 6544, user: "postgres", database: "postgres",
		backends: []backend{{"127.0.0.1", "5432"}, {"127.0.0.1", "5433"}},
	}
	tests := []struct {
		name     string
		opts     Config
		password string
		want     []string // lines of pgpool.conf
		last     string   // the last line
	}{
		{"defaults", Config{}, "", []string{
			"backend_clustering_mode = 'streaming_replication'",
			"listen_addresses = '127.0.0.1'", "port = 6543", "unix_socket_directories = '/d'",
			"pcp_listen_addresses = '127.0.0.1'", "pcp_port = 6544", "pcp_socket_dir = '/d'",
			"backend_hostname0 = '127.0.0.1'", "backend_port0 = 5432", "backend_weight0 = 1", "backend_flag0 = 'ALLOW_TO_FAILOVER'",
			"backend_hostname1 = '127.0.0.1'", "backend_port1 = 5433", "backend_weight1 = 1", "backend_flag1 = 'ALLOW_TO_FAILOVER'",
			"enable_pool_hba = off", "pool_passwd = ''", "num_init_children = 8", "max_pool = 4",
			"connection_cache = on", "load_balance_mode = on", "disable_load_balance_on_write = 'transaction'",
			"sr_check_period = 0", "sr_check_user = 'postgres'", "sr_check_password = 'TEXT'", "sr_check_database = 'postgres'",
			"health_check_period = 0", "pid_file_name = '/d/pgpool.pid'", "logdir = '/d'",
			"log_per_node_statement = on", "log_destination = 'stderr'",
		}, "log_destination = 'stderr'"},
		{"set", Config{
			NumInitChildren: 3, MaxPool: 1,
			Extra: map[string]string{"num_init_children": "5", "failover_on_backend_error": "off"},
		}, "s3cret", []string{
			"num_init_children = 3", "max_pool = 1", "sr_check_password = 'TEXTs3cret'", "failover_on_backend_error = off",
		}, "num_init_children = 5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := tc.opts.config()
			if err != nil {
				t.Fatal(err)
			}
			p := params
			p.password = tc.password
			text := cfg.confText(p)
			for _, want := range tc.want {
				if !strings.Contains("\n"+text, "\n"+want+"\n") {
					t.Errorf("config has no line %q:\n%s", want, text)
				}
			}
			lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
			if got := lines[len(lines)-1]; got != tc.last {
				t.Errorf("last line %q, want %q", got, tc.last)
			}
			for _, unwanted := range []string{"failover_command", "health_check_user"} {
				if strings.Contains(text, unwanted) {
					t.Errorf("config sets %s:\n%s", unwanted, text)
				}
			}
			if tc.opts.Extra == nil && strings.Contains(text, "failover_on_backend_error") {
				t.Errorf("config sets failover_on_backend_error without Extra:\n%s", text)
			}
		})
	}
}

func TestPgpoolPCPFiles(t *testing.T) {
	t.Parallel()
	if got, want := pcpConfText("postgres", "secret"), "postgres:5ebe2294ecd0e0f08eab7690d2a6ee69\n"; got != want {
		t.Errorf("pcp.conf = %q, want %q", got, want)
	}
	if got, want := pcpPassText("postgres", "0a1b"), "127.0.0.1:*:postgres:0a1b\n"; got != want {
		t.Errorf("PCPPASSFILE = %q, want %q", got, want)
	}
}

func TestPgpoolBadOptions(t *testing.T) {
	t.Parallel()
	srv := server.Shared(t)
	tests := []struct {
		name    string
		servers []*server.Server
		opts    Config
		wantMsg string
	}{
		{"no primary", []*server.Server{nil}, Config{}, "needs servers"},
		{"server without DSN", []*server.Server{srv, {}}, Config{}, "needs servers"},
		{"negative num_init_children", []*server.Server{srv}, Config{NumInitChildren: -1}, "NumInitChildren -1 is negative"},
		{"negative max_pool", []*server.Server{srv}, Config{MaxPool: -2}, "MaxPool -2 is negative"},
		{"extra name with a dot", []*server.Server{srv}, Config{Extra: map[string]string{"log.level": "x"}}, "invalid setting name"},
		{"extra name with a space", []*server.Server{srv}, Config{Extra: map[string]string{"max pool": "1"}}, "invalid setting name"},
		{"empty extra name", []*server.Server{srv}, Config{Extra: map[string]string{"": "1"}}, "invalid setting name"},
		{"extra value with a newline", []*server.Server{srv}, Config{Extra: map[string]string{"port": "1\nport = 2"}}, "line break"},
		{"extra value with a carriage return", []*server.Server{srv}, Config{Extra: map[string]string{"port": "1\r"}}, "line break"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := startPgpool(context.Background(), "/nonexistent/pgpool", tc.servers, tc.opts)
			if err == nil {
				_ = p.Stop()
				t.Fatal("startPgpool succeeded")
			}
			kittest.CheckConfigError(t, err, tc.wantMsg, tc.wantMsg != "needs servers")
		})
	}
}
