package bulkhead

import (
	"testing"
	"time"

	"github.com/pgtx-go/pgtx"
)

// unreachableConfig returns a Config whose pools never connect: pgxpool
// opens connections on demand, CancelModeProtocol has no cancel pool, and
// nothing listens on port 1.
func unreachableConfig(t *testing.T) *pgtx.Config {
	t.Helper()
	cfg, err := pgtx.ParseConfig("postgres://pgtx@127.0.0.1:1/none?pool_max_conns=6")
	if err != nil {
		t.Fatal(err)
	}
	cfg.CancelMode = pgtx.CancelModeProtocol
	return cfg
}

func TestPoolConfig(t *testing.T) {
	tests := []struct {
		name string
		pc   PoolConfig
		// want
		maxConns, minConns, minIdleConns int32
		maxWaiters                       int
		acquireTimeout                   time.Duration
	}{
		{"zero PoolConfig: the base's", PoolConfig{}, 6, 3, 2, 9, 700 * time.Millisecond},
		{"smaller pool caps MinConns and MinIdleConns", PoolConfig{MaxConns: 2}, 2, 2, 2, 9, 700 * time.Millisecond},
		{"a single connection", PoolConfig{MaxConns: 1}, 1, 1, 1, 9, 700 * time.Millisecond},
		{"larger pool", PoolConfig{MaxConns: 20}, 20, 3, 2, 9, 700 * time.Millisecond},
		{"negative MaxConns: the base's", PoolConfig{MaxConns: -1}, 6, 3, 2, 9, 700 * time.Millisecond},
		{"own MaxWaiters", PoolConfig{MaxWaiters: 4}, 6, 3, 2, 4, 700 * time.Millisecond},
		{"negative MaxWaiters: no bound", PoolConfig{MaxWaiters: -1}, 6, 3, 2, 0, 700 * time.Millisecond},
		{"own AcquireTimeout", PoolConfig{AcquireTimeout: 100 * time.Millisecond}, 6, 3, 2, 9, 100 * time.Millisecond},
		{"negative AcquireTimeout: no bound of its own", PoolConfig{AcquireTimeout: -1}, 6, 3, 2, 9, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := unreachableConfig(t)
			base.MinConns, base.MinIdleConns = 3, 2
			base.MaxWaiters = 9
			base.AcquireTimeout = 700 * time.Millisecond
			base.StatementTimeout = 3 * time.Second
			want := *base
			wantPool := *base.Config

			cfg := poolConfig(base, "c", tt.pc)
			if cfg.MaxConns != tt.maxConns || cfg.MinConns != tt.minConns || cfg.MinIdleConns != tt.minIdleConns {
				t.Errorf("MaxConns, MinConns, MinIdleConns = %d, %d, %d, want %d, %d, %d",
					cfg.MaxConns, cfg.MinConns, cfg.MinIdleConns, tt.maxConns, tt.minConns, tt.minIdleConns)
			}
			if cfg.MaxWaiters != tt.maxWaiters || cfg.AcquireTimeout != tt.acquireTimeout {
				t.Errorf("MaxWaiters, AcquireTimeout = %d, %v, want %d, %v",
					cfg.MaxWaiters, cfg.AcquireTimeout, tt.maxWaiters, tt.acquireTimeout)
			}
			if cfg.StatementTimeout != base.StatementTimeout || cfg.CancelMode != base.CancelMode {
				t.Errorf("StatementTimeout, CancelMode = %v, %v, want the base's %v, %v",
					cfg.StatementTimeout, cfg.CancelMode, base.StatementTimeout, base.CancelMode)
			}
			if cfg.Config == base.Config || cfg.ConnConfig == base.ConnConfig {
				t.Error("the pool's pgxpool.Config or ConnConfig is the base's, want a copy")
			}
			if cfg.ConnConfig.Host != base.ConnConfig.Host || cfg.ConnConfig.Port != base.ConnConfig.Port {
				t.Errorf("connects to %s:%d, want the base's %s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port,
					base.ConnConfig.Host, base.ConnConfig.Port)
			}
			if base.Config != want.Config || base.MaxWaiters != want.MaxWaiters || base.AcquireTimeout != want.AcquireTimeout ||
				base.MaxConns != wantPool.MaxConns || base.MinConns != wantPool.MinConns || base.MinIdleConns != wantPool.MinIdleConns {
				t.Error("base modified")
			}
		})
	}
}

func TestPoolConfigBreaker(t *testing.T) {
	tests := []struct {
		name     string
		breaker  *pgtx.BreakerConfig
		wantName string // "": no breaker
	}{
		{"no breaker", nil, ""},
		{"unnamed: the pool name", &pgtx.BreakerConfig{ConsecutiveFailures: 3}, "reports"},
		{"named: name/pool", &pgtx.BreakerConfig{Name: "db", ConsecutiveFailures: 3}, "db/reports"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := unreachableConfig(t)
			base.Breaker = tt.breaker
			var before pgtx.BreakerConfig
			if tt.breaker != nil {
				before = *tt.breaker
			}
			cfg := poolConfig(base, "reports", PoolConfig{})
			if tt.breaker == nil {
				if cfg.Breaker != nil {
					t.Errorf("Breaker = %+v, want nil", cfg.Breaker)
				}
				return
			}
			if cfg.Breaker == nil || cfg.Breaker == tt.breaker {
				t.Fatalf("Breaker = %p, want a copy of the base's %p", cfg.Breaker, tt.breaker)
			}
			if cfg.Breaker.Name != tt.wantName || cfg.Breaker.ConsecutiveFailures != 3 {
				t.Errorf("Breaker = %+v, want the base's named %q", *cfg.Breaker, tt.wantName)
			}
			if *tt.breaker != before {
				t.Errorf("base Breaker modified: %+v, was %+v", *tt.breaker, before)
			}
		})
	}
}
