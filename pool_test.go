package pgtx

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

const unreachableDSN = "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"

func mustParse(t *testing.T, dsn string) *Config {
	t.Helper()
	cfg, err := ParseConfig(dsn)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	return cfg
}

func TestNewWithConfigRejectsBadConfig(t *testing.T) {
	pc, err := pgxpool.ParseConfig(unreachableDSN)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		config func() *Config
	}{
		{"nil config", func() *Config { return nil }},
		{"zero Config", func() *Config { return &Config{} }},
		{"Config literal around a parsed pgxpool.Config", func() *Config { return &Config{Config: pc} }},
		{"Config literal around an unparsed pgxpool.Config", func() *Config { return &Config{Config: &pgxpool.Config{}} }},
		{"replaced embedded pgxpool.Config", func() *Config { c := mustParse(t, unreachableDSN); c.Config = pc; return c }},
		{"nil ConnConfig", func() *Config { c := mustParse(t, unreachableDSN); c.ConnConfig = nil; return c }},
		{"negative MaxConns", func() *Config { c := mustParse(t, unreachableDSN); c.MaxConns = -1; return c }},
		{"zero MaxConns", func() *Config { c := mustParse(t, unreachableDSN); c.MaxConns = 0; return c }},
		{"MinConns above MaxConns", func() *Config { c := mustParse(t, unreachableDSN); c.MaxConns = 2; c.MinConns = 3; return c }},
		{"negative MinConns", func() *Config { c := mustParse(t, unreachableDSN); c.MinConns = -1; return c }},
		{"negative MinIdleConns", func() *Config { c := mustParse(t, unreachableDSN); c.MinIdleConns = -1; return c }},
		{"negative CommitTimeout", func() *Config { c := mustParse(t, unreachableDSN); c.CommitTimeout = -time.Second; return c }},
		{"negative RollbackTimeout", func() *Config { c := mustParse(t, unreachableDSN); c.RollbackTimeout = -time.Second; return c }},
		{"negative backoff", func() *Config { c := mustParse(t, unreachableDSN); c.Retry.MaxBackoff = -time.Second; return c }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewWithConfig(context.Background(), tt.config())
			if err == nil {
				p.Close()
				t.Fatal("NewWithConfig accepted a bad config")
			}
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("err = %v, want ErrInvalidArgument", err)
			}
		})
	}
}

func TestParseConfigError(t *testing.T) {
	if _, err := ParseConfig("postgres://[::1"); err == nil {
		t.Error("ParseConfig accepted a malformed URL")
	}
	if _, err := New(context.Background(), "postgres://[::1"); err == nil {
		t.Error("New accepted a malformed URL")
	}
}

func TestSessionParameters(t *testing.T) {
	tests := []struct {
		name          string
		dsn           string
		stmt, idle    time.Duration
		wantStmt      string
		wantIdle      string
		wantStmtUnset bool
	}{
		{name: "defaults", dsn: unreachableDSN, wantStmt: "5000", wantIdle: "10000"},
		{name: "explicit", dsn: unreachableDSN, stmt: 1500 * time.Millisecond, idle: time.Minute, wantStmt: "1500", wantIdle: "60000"},
		{name: "sub-millisecond rounds up", dsn: unreachableDSN, stmt: time.Microsecond, wantStmt: "1", wantIdle: "10000"},
		{name: "connection string wins over the default", dsn: unreachableDSN + "&statement_timeout=777", wantStmt: "777", wantIdle: "10000"},
		{name: "explicit wins over the connection string", dsn: unreachableDSN + "&statement_timeout=777", stmt: 2 * time.Second, wantStmt: "2000", wantIdle: "10000"},
		{name: "negative leaves the server's setting", dsn: unreachableDSN, stmt: -1, wantStmtUnset: true, wantIdle: "10000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, tt.dsn)
			cfg.StatementTimeout, cfg.IdleInTransactionTimeout = tt.stmt, tt.idle
			p, err := NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			params := p.Config().ConnConfig.RuntimeParams
			got, ok := params["statement_timeout"]
			if tt.wantStmtUnset {
				if ok {
					t.Errorf("statement_timeout = %q, want unset", got)
				}
			} else if got != tt.wantStmt {
				t.Errorf("statement_timeout = %q, want %q", got, tt.wantStmt)
			}
			if got := params["idle_in_transaction_session_timeout"]; got != tt.wantIdle {
				t.Errorf("idle_in_transaction_session_timeout = %q, want %q", got, tt.wantIdle)
			}
			if _, ok := cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; ok {
				t.Errorf("NewWithConfig modified the caller's Config")
			}
		})
	}
}

func TestDefaultsResolved(t *testing.T) {
	p, err := NewWithConfig(context.Background(), mustParse(t, unreachableDSN))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	s := p.settings
	if s.acquireTimeout != DefaultAcquireTimeout || s.commitTimeout != DefaultCommitTimeout || s.rollbackTimeout != DefaultRollbackTimeout {
		t.Errorf("timeouts = %+v", s)
	}
	r := s.retry
	if r.MaxRetries != 10 || r.MaxAdaptiveRetries != 2 || r.BaseBackoff != 100*time.Millisecond || r.MaxBackoff != 10*time.Second || r.Jitter == nil {
		t.Errorf("retry defaults = %+v", r)
	}
}

// TestOptionsSet: the libpq options forms that set a server parameter.
func TestOptionsSet(t *testing.T) {
	tests := []struct {
		options string
		want    bool
	}{
		{"-c statement_timeout=60000", true},
		{"-cstatement_timeout=60000", true},
		{"--statement_timeout=60000", true},
		{"--statement-timeout=60000", true},
		{"-c work_mem=8MB -c statement_timeout=1s", true},
		{"-c STATEMENT_TIMEOUT=1s", true},
		{"-c work_mem=8MB", false},
		{"-c application_name=statement_timeout\\ 5", false},
		{"-c statement_timeout", false},
		{"", false},
		{"-c", false},
	}
	for _, tt := range tests {
		if got := optionsSet(tt.options, "statement_timeout"); got != tt.want {
			t.Errorf("optionsSet(%q) = %v, want %v", tt.options, got, tt.want)
		}
	}
}
