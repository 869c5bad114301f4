package pgtx

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	tests := []struct {
		name   string
		config func() *Config
	}{
		{"nil config", func() *Config { return nil }},
		{"zero Config", func() *Config { return &Config{} }},
		{"Config literal around an unparsed pgxpool.Config", func() *Config { return &Config{Config: &pgxpool.Config{}} }},
		{"nil ConnConfig", func() *Config { c := mustParse(t, unreachableDSN); c.ConnConfig = nil; return c }},
		{"negative MaxConns", func() *Config { c := mustParse(t, unreachableDSN); c.MaxConns = -1; return c }},
		{"zero MaxConns", func() *Config { c := mustParse(t, unreachableDSN); c.MaxConns = 0; return c }},
		{"MinConns above MaxConns", func() *Config { c := mustParse(t, unreachableDSN); c.MaxConns = 2; c.MinConns = 3; return c }},
		{"negative MinConns", func() *Config { c := mustParse(t, unreachableDSN); c.MinConns = -1; return c }},
		{"negative MinIdleConns", func() *Config { c := mustParse(t, unreachableDSN); c.MinIdleConns = -1; return c }},
		{"negative MaxWaiters (the bound is off at 0)", func() *Config { c := mustParse(t, unreachableDSN); c.MaxWaiters = -1; return c }},
		{"unknown CancelMode", func() *Config { c := mustParse(t, unreachableDSN); c.CancelMode = 7; return c }},
		{"NaN budget ratio", func() *Config { c := mustParse(t, unreachableDSN); c.Retry.BudgetRatio = math.NaN(); return c }},
		{"NaN contention threshold", func() *Config { c := mustParse(t, unreachableDSN); c.Contention.Threshold = math.NaN(); return c }},
		{"contention threshold above 1", func() *Config { c := mustParse(t, unreachableDSN); c.Contention.Threshold = 1.5; return c }},
		{"breaker ratio above 1", func() *Config {
			c := mustParse(t, unreachableDSN)
			c.Breaker = &BreakerConfig{FailureRatio: 2}
			return c
		}},
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

// TestClientEncoding: pgtx asks for client_encoding UTF8 at connect (pgx's
// simple protocol needs it, and a server in the C locale reports SQL_ASCII
// otherwise), unless the connection string chose one.
func TestClientEncoding(t *testing.T) {
	for _, tt := range []struct{ dsn, want, wantOptions string }{
		{unreachableDSN, "UTF8", ""},
		{unreachableDSN + "&client_encoding=LATIN1", "LATIN1", ""},
		{unreachableDSN + "&options=-c%20client_encoding%3DLATIN1", "", "-c client_encoding=LATIN1"},
	} {
		p, err := NewWithConfig(context.Background(), mustParse(t, tt.dsn))
		if err != nil {
			t.Fatal(err)
		}
		params := p.pool.Config().ConnConfig.RuntimeParams
		if params["client_encoding"] != tt.want || params["options"] != tt.wantOptions {
			t.Errorf("%s: client_encoding %q, options %q; want %q, %q", tt.dsn, params["client_encoding"], params["options"], tt.want, tt.wantOptions)
		}
		p.Close()
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
			params := p.pool.Config().ConnConfig.RuntimeParams
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

// TestAdoptPgxpoolConfig: a *pgxpool.Config made elsewhere, with hooks of
// its own, is adopted as a Config literal, every pgtx field at its default;
// the hook is kept.
func TestAdoptPgxpoolConfig(t *testing.T) {
	pc, err := pgxpool.ParseConfig(unreachableDSN)
	if err != nil {
		t.Fatal(err)
	}
	var hooked atomic.Bool // the cancel pool's warm connect runs it too, in the background
	pc.BeforeConnect = func(context.Context, *pgx.ConnConfig) error { hooked.Store(true); return errors.New("no token") }
	pc.MaxConns = 7
	p, err := NewWithConfig(context.Background(), &Config{Config: pc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if p.settings.acquireTimeout != defaultAcquireTimeout || !p.settings.resolveCommits || p.pool.Config().MaxConns != 7 {
		t.Errorf("settings %+v, MaxConns %d", p.settings, p.pool.Config().MaxConns)
	}
	if got := p.pool.Config().ConnConfig.RuntimeParams["statement_timeout"]; got != "5000" {
		t.Errorf("statement_timeout = %q, want the default 5000", got)
	}
	if err := p.Ping(context.Background()); err == nil || !hooked.Load() {
		t.Errorf("Ping: err %v, hook called %v: the adopted BeforeConnect must run", err, hooked.Load())
	}
	if c := p.Config(); c.MaxConns != 7 || c.Config == pc {
		t.Errorf("Config() must be a copy of the adopted config")
	}
}

// TestNegativeSwitchesOff checks the package's rule on Config: a negative
// value switches the setting off, never an error.
func TestNegativeSwitchesOff(t *testing.T) {
	cfg := mustParse(t, unreachableDSN)
	cfg.AcquireTimeout, cfg.CommitTimeout, cfg.RollbackTimeout = -1, -1, -1
	cfg.ResolveTimeout, cfg.CancelGrace, cfg.CancelConnectTimeout = -1, -1, -1
	cfg.StatementTimeout, cfg.IdleInTransactionTimeout = -1, -1
	cfg.Retry = RetryConfig{MaxRetries: -1, MaxAdaptiveRetries: -1, UnavailableTimeout: -1, BaseBackoff: -1, MaxBackoff: -1,
		ConflictBaseBackoff: -1, ConflictMaxBackoff: -1, BudgetRatio: -1}
	cfg.Contention.Threshold = -1
	p, err := NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("negative settings must be accepted: %v", err)
	}
	t.Cleanup(p.Close)
	s := p.settings
	if s.acquireTimeout != 0 || s.commitTimeout != 0 || s.rollbackTimeout != 0 || s.resolveCommits || p.queue.Bounds().MaxWaiters != 0 ||
		p.cancel.Grace() != 0 || p.budget != nil || s.statementTimeout != 0 || p.contention != nil || p.Stats().Contention != nil {
		t.Errorf("settings %+v, maxWaiters %d, grace %v, budget %v: every one must be off", s, p.queue.Bounds().MaxWaiters, p.cancel.Grace(), p.budget)
	}
	r := p.loop.Policy
	if r.MaxRetries != 0 || r.MaxAdaptiveRetries != 0 || r.UnavailableTimeout != 0 || r.BaseBackoff != 0 || r.ConflictMaxBackoff != 0 {
		t.Errorf("retry %+v: every one must be off", r)
	}
	params := p.pool.Config().ConnConfig.RuntimeParams
	if _, ok := params["statement_timeout"]; ok {
		t.Error("statement_timeout sent")
	}
	if _, ok := params["idle_in_transaction_session_timeout"]; ok {
		t.Error("idle_in_transaction_session_timeout sent")
	}
	if p.txn.CommitTimeout != 0 || p.txn.RollbackTimeout != 0 {
		// internal/txn sets no socket deadline for a timeout of 0.
		t.Errorf("transactions get CommitTimeout %v, RollbackTimeout %v; want 0: no bound", p.txn.CommitTimeout, p.txn.RollbackTimeout)
	}
}

func TestDefaultsResolved(t *testing.T) {
	p, err := NewWithConfig(context.Background(), mustParse(t, unreachableDSN))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	s := p.settings
	if s.acquireTimeout != defaultAcquireTimeout || s.commitTimeout != defaultCommitTimeout || s.rollbackTimeout != defaultRollbackTimeout {
		t.Errorf("timeouts = %+v", s)
	}
	r := p.loop.Policy
	if r.MaxRetries != 10 || r.MaxAdaptiveRetries != 2 || r.UnavailableTimeout != 15*time.Second || r.BaseBackoff != 100*time.Millisecond ||
		r.MaxBackoff != 10*time.Second || r.Jitter == nil {
		t.Errorf("retry defaults = %+v", r)
	}
}

// TestConfigCopy: Copy keeps every pgtx field (pgxpool's Copy, which
// Config would otherwise promote, drops them), and the copy shares nothing
// a caller may change with the original.
func TestConfigCopy(t *testing.T) {
	cfg, err := ParseConfig("postgres://app@localhost:5432/app")
	if err != nil {
		t.Fatal(err)
	}
	cfg.AcquireTimeout = 3 * time.Second
	cfg.ResolveTimeout = -1
	cfg.MaxWaiters = 7
	cfg.Retry.MaxRetries = 4
	cfg.Contention.Threshold = 0.3
	cfg.Breaker = &BreakerConfig{FailureRatio: 0.5}
	cfg.MaxConns = 9
	cp := cfg.Copy()
	if cp.AcquireTimeout != 3*time.Second || cp.ResolveTimeout != -1 || cp.MaxWaiters != 7 || cp.Retry.MaxRetries != 4 ||
		cp.Contention.Threshold != 0.3 || cp.Breaker == nil || cp.Breaker.FailureRatio != 0.5 || cp.MaxConns != 9 {
		t.Fatalf("Copy lost fields: %+v", cp)
	}
	cp.MaxConns, cp.Breaker.FailureRatio, cp.ConnConfig.Database = 1, 0.9, "other"
	if cfg.MaxConns != 9 || cfg.Breaker.FailureRatio != 0.5 || cfg.ConnConfig.Database != "app" {
		t.Errorf("changing the copy changed the original: MaxConns %d, FailureRatio %v, Database %q", cfg.MaxConns, cfg.Breaker.FailureRatio, cfg.ConnConfig.Database)
	}
	var nilCfg *Config
	if nilCfg.Copy() != nil {
		t.Error("a nil Config's Copy is not nil")
	}
}

// TestUnknownCancelModeListsTheModes: a CancelMode out of range is refused
// with an error that names every valid mode, so the fix is in the message.
func TestUnknownCancelModeListsTheModes(t *testing.T) {
	for _, mode := range []CancelMode{42, -1, CancelModeClose + 1} {
		cfg := mustParse(t, unreachableDSN)
		cfg.CancelMode = mode
		p, err := NewWithConfig(context.Background(), cfg)
		if err == nil {
			p.Close()
			t.Fatalf("%v: NewWithConfig accepted it", mode)
		}
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%v: err = %v, want ErrInvalidArgument", mode, err)
		}
		for _, name := range []string{"CancelModePool", "CancelModeProtocol", "CancelModeClose", mode.String()} {
			if !strings.Contains(err.Error(), name) {
				t.Errorf("%v: err %q does not name %s", mode, err, name)
			}
		}
	}
}
