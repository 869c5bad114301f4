package cancel

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/tracelog"
)

// mainConfig returns a main pool's config as a caller makes it, with
// pgtx's own hooks and its caller's tracer in its ConnConfig.
func mainConfig(t *testing.T) *pgxpool.Config {
	t.Helper()
	pc, err := pgxpool.ParseConfig("postgres://app@db.internal:5432/shop?application_name=checkout&statement_timeout=30000&idle_in_transaction_session_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConnIdleTime, pc.MaxConnLifetime, pc.HealthCheckPeriod = 3*time.Minute, 40*time.Minute, 20*time.Second
	pc.ConnConfig.Tracer = &tracelog.TraceLog{}
	return pc
}

// TestPoolConfig: the cancel pool reaches the main pool's server as its
// role (or CancelConnString's), with its own size, connect timeout and
// statement_timeout, no idle-in-transaction timeout, pgx's context
// handling and no tracer, and the main pool's lifetimes; the caller's
// config is left as it was.
func TestPoolConfig(t *testing.T) {
	hook := func(context.Context, *pgx.ConnConfig) error { return nil }
	tests := []struct {
		name          string
		connString    string
		millis        int64
		wantHost      string
		wantUser      string
		wantTimeout   string
		wantApp       string
		wantHookKept  bool
		wantErrPrefix string
	}{
		{"the main pool's role", "", 2000, "db.internal", "app", "2000", "checkout (pgtx cancel)", true, ""},
		{"no statement_timeout of its own", "", 0, "db.internal", "app", "30000", "checkout (pgtx cancel)", true, ""},
		{"a role of its own", "postgres://canceller@db.internal:6432/shop", 2000, "db.internal", "canceller", "2000", "", false, ""},
		{"an invalid CancelConnString", "postgres://%zz", 2000, "", "", "", "", false, "pgtx: CancelConnString: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			main := mainConfig(t)
			before := len(main.ConnConfig.RuntimeParams)
			var edited bool
			cp, err := PoolConfig(PoolSettings{
				ConnConfig:             main.ConnConfig,
				BeforeConnect:          hook,
				ConnString:             tt.connString,
				ConnectTimeout:         750 * time.Millisecond,
				StatementTimeoutMillis: tt.millis,
				SessionParams:          func(p map[string]string) { edited, p["client_encoding"] = true, "UTF8" },
				Main:                   main,
			})
			if tt.wantErrPrefix != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErrPrefix) {
					t.Fatalf("PoolConfig = %v, want an error starting %q", err, tt.wantErrPrefix)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cc := cp.ConnConfig
			params := cc.RuntimeParams
			if cc.Host != tt.wantHost || cc.User != tt.wantUser {
				t.Errorf("connects to %s as %s, want %s as %s", cc.Host, cc.User, tt.wantHost, tt.wantUser)
			}
			if params["statement_timeout"] != tt.wantTimeout || params["application_name"] != tt.wantApp {
				t.Errorf("statement_timeout %q, application_name %q; want %q, %q", params["statement_timeout"], params["application_name"], tt.wantTimeout, tt.wantApp)
			}
			if _, ok := params["idle_in_transaction_session_timeout"]; ok {
				t.Error("the cancel pool's sessions got an idle_in_transaction_session_timeout")
			}
			if !edited || params["client_encoding"] != "UTF8" {
				t.Error("SessionParams did not complete the sessions' parameters")
			}
			if cc.ConnectTimeout != 750*time.Millisecond || cc.Tracer != nil || cc.BuildContextWatcherHandler == nil {
				t.Errorf("connect timeout %v, tracer %v, context watcher set %v", cc.ConnectTimeout, cc.Tracer, cc.BuildContextWatcherHandler != nil)
			}
			if (cp.BeforeConnect != nil) != tt.wantHookKept {
				t.Errorf("BeforeConnect kept %v, want %v", cp.BeforeConnect != nil, tt.wantHookKept)
			}
			if cp.MaxConns != poolSize || cp.MinConns != 1 {
				t.Errorf("size %d (min %d), want %d (min 1)", cp.MaxConns, cp.MinConns, poolSize)
			}
			if cp.MaxConnIdleTime != main.MaxConnIdleTime || cp.MaxConnLifetime != main.MaxConnLifetime || cp.HealthCheckPeriod != main.HealthCheckPeriod {
				t.Errorf("lifetimes %v, %v, %v; want the main pool's", cp.MaxConnIdleTime, cp.MaxConnLifetime, cp.HealthCheckPeriod)
			}
			if len(main.ConnConfig.RuntimeParams) != before || main.ConnConfig.RuntimeParams["application_name"] != "checkout" || main.ConnConfig.Tracer == nil {
				t.Error("the main pool's ConnConfig was changed")
			}
		})
	}
}

// TestOpen: in ModePool the Canceller opens its cancel pool, cancels over
// it and closes it; in the other modes it opens none, and the pool's
// settings are not read; a config the cancel pool cannot use is an error.
func TestOpen(t *testing.T) {
	ctx := context.Background()
	clk := &fakeClock{now: time.Now()}
	for _, mode := range []Mode{ModeProtocol, ModeClose} {
		c, err := Open(ctx, Settings{Mode: mode}, PoolSettings{}, clk)
		if err != nil || c.Pool() != nil {
			t.Fatalf("mode %d: Open = %v, cancel pool %v; want none", mode, err, c.Pool())
		}
		c.Close()
	}

	main, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	ps := PoolSettings{ConnConfig: main.ConnConfig, ConnectTimeout: time.Second, Main: main}
	c, err := Open(ctx, Settings{Mode: ModePool}, ps, clk)
	if err != nil {
		t.Fatal(err)
	}
	pool := c.Pool()
	if pool == nil || pool.Config().MaxConns != poolSize || c.Limited() == nil || c.Limited().Pool != pool || c.s.Pool != (limitedPool{c.Limited()}) {
		t.Fatalf("cancel pool %v, the one cancelled over %v; want one of %d connections, the same", pool, c.s.Pool, poolSize)
	}
	c.Close()
	if conn, err := pool.Acquire(ctx); err == nil {
		conn.Release()
		t.Error("Close left the cancel pool open")
	}

	ps.ConnString = "postgres://%zz"
	if _, err := Open(ctx, Settings{Mode: ModePool}, ps, clk); err == nil || !strings.HasPrefix(err.Error(), "pgtx: CancelConnString: ") {
		t.Errorf("Open with an invalid CancelConnString = %v", err)
	}
}

// TestCancelPoolWaitsForTheMainPool: the cancel pool's connects (its
// BeforeConnect, which runs the caller's) wait until the main pool has a
// connection set up, so that a new pool's first connect does not share the
// server with the cancel pool's; a connect still waiting when the
// Canceller closes fails, and the caller's hook never runs for it.
func TestCancelPoolWaitsForTheMainPool(t *testing.T) {
	ctx := context.Background()
	clk := &fakeClock{now: time.Now()}
	main, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	errHook := errors.New("the caller's BeforeConnect")
	open := func(calls *atomic.Int32) *Canceller {
		ps := PoolSettings{ConnConfig: main.ConnConfig, ConnectTimeout: time.Second, Main: main,
			BeforeConnect: func(context.Context, *pgx.ConnConfig) error { calls.Add(1); return errHook }}
		c, err := Open(ctx, Settings{Mode: ModePool}, ps, clk)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()

	var calls atomic.Int32
	c := open(&calls)
	connect := c.Pool().Config().BeforeConnect
	if err := connect(ended, main.ConnConfig.Copy()); !errors.Is(err, context.Canceled) || calls.Load() != 0 {
		t.Errorf("before the main pool's first connection: %v, the caller's hook run %d times; want it waiting, not run", err, calls.Load())
	}
	var h Handler
	h.Init(c, nil, nil)
	h.SetReady()
	if err := connect(ended, main.ConnConfig.Copy()); !errors.Is(err, errHook) || calls.Load() == 0 {
		t.Errorf("once a main connection is set up: %v; want the caller's hook run", err)
	}
	c.Close()

	var closedCalls atomic.Int32
	c = open(&closedCalls)
	c.Close()
	if err := c.Pool().Config().BeforeConnect(ctx, main.ConnConfig.Copy()); !errors.Is(err, errClosedFirst) || closedCalls.Load() != 0 {
		t.Errorf("closed before the main pool's first connection: %v, the caller's hook run %d times; want errClosedFirst, not run", err, closedCalls.Load())
	}
}
