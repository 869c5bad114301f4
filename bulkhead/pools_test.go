package bulkhead

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx"
)

func TestNewInvalid(t *testing.T) {
	badBase := unreachableConfig(t)
	badBase.CancelMode = pgtx.CancelMode(99)
	one := map[string]PoolConfig{"a": {}}
	tests := []struct {
		name  string
		base  *pgtx.Config
		pools map[string]PoolConfig
		want  string
	}{
		{"nil base", nil, one, "nil base Config"},
		{"base without a pgxpool.Config", &pgtx.Config{}, one, "ParseConfig"},
		{"base refused by NewWithConfig", badBase, one, `class "a"`},
		{"nil pools", unreachableConfig(t), nil, "at least one class"},
		{"no pools", unreachableConfig(t), map[string]PoolConfig{}, "at least one class"},
		{"empty name", unreachableConfig(t), map[string]PoolConfig{"a": {}, "": {}}, "must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(context.Background(), &Config{Base: tt.base, Pools: tt.pools})
			if p != nil {
				p.Close()
				t.Fatal("got Pools, want nil")
			}
			if !errors.Is(err, pgtx.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalidArgument saying %q", err, tt.want)
			}
		})
	}
}

// TestNewClosesOnFailure: when a class's pool cannot be opened, New closes
// those it opened (the goroutine check of TestMain sees any left open) and
// names the class.
func TestNewClosesOnFailure(t *testing.T) {
	errRefused := errors.New("refused")
	var opened []*pgtx.Pool
	openPool = func(ctx context.Context, cfg *pgtx.Config) (*pgtx.Pool, error) {
		if len(opened) == 2 {
			return nil, errRefused
		}
		p, err := pgtx.NewWithConfig(ctx, cfg)
		if err == nil {
			opened = append(opened, p)
		}
		return p, err
	}
	t.Cleanup(func() { openPool = pgtx.NewWithConfig })

	p, err := New(context.Background(), &Config{Base: unreachableConfig(t), Pools: map[string]PoolConfig{"a": {}, "b": {}, "c": {}, "d": {}}})
	if p != nil || !errors.Is(err, errRefused) || !strings.Contains(err.Error(), `class "c"`) {
		t.Fatalf("New = %v, %v, want nil and class c's error", p, err)
	}
	if len(opened) != 2 {
		t.Fatalf("opened %d pools, want 2", len(opened))
	}
}

func TestPools(t *testing.T) {
	base := unreachableConfig(t)
	base.MinConns = 3
	base.AcquireTimeout = 700 * time.Millisecond
	base.MaxWaiters = 9
	pools, err := New(context.Background(), &Config{Base: base, Pools: map[string]PoolConfig{
		"checkout": {MaxConns: 2, MaxWaiters: 4, AcquireTimeout: 100 * time.Millisecond},
		"reports":  {AcquireTimeout: -1, MaxWaiters: -1},
		"audit":    {MaxConns: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pools.Close)

	if got, want := pools.Names(), []string{"audit", "checkout", "reports"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %q, want %q", got, want)
	}
	tests := []struct {
		class          string
		maxConns       int32
		minConns       int32
		maxWaiters     int
		acquireTimeout time.Duration
	}{
		{"checkout", 2, 2, 4, 100 * time.Millisecond},
		{"reports", 6, 3, 0, -1},
		{"audit", 1, 1, 9, 700 * time.Millisecond},
	}
	seen := map[*pgtx.Pool]bool{}
	for _, tt := range tests {
		t.Run(tt.class, func(t *testing.T) {
			p, err := pools.Pool(tt.class)
			if err != nil {
				t.Fatal(err)
			}
			seen[p] = true
			if got := p.Stats().Pool.MaxConns(); got != tt.maxConns {
				t.Errorf("pool MaxConns = %d, want %d", got, tt.maxConns)
			}
			cfg := p.Config()
			if cfg.MaxConns != tt.maxConns || cfg.MinConns != tt.minConns {
				t.Errorf("Config MaxConns, MinConns = %d, %d, want %d, %d", cfg.MaxConns, cfg.MinConns, tt.maxConns, tt.minConns)
			}
			if cfg.MaxWaiters != tt.maxWaiters || cfg.AcquireTimeout != tt.acquireTimeout {
				t.Errorf("Config MaxWaiters, AcquireTimeout = %d, %v, want %d, %v",
					cfg.MaxWaiters, cfg.AcquireTimeout, tt.maxWaiters, tt.acquireTimeout)
			}
		})
	}
	if len(seen) != len(tests) {
		t.Errorf("%d distinct pools for %d classes", len(seen), len(tests))
	}
	if base.MaxConns != 6 || base.MinConns != 3 || base.MaxWaiters != 9 || base.AcquireTimeout != 700*time.Millisecond {
		t.Errorf("base modified: MaxConns %d, MinConns %d, MaxWaiters %d, AcquireTimeout %v",
			base.MaxConns, base.MinConns, base.MaxWaiters, base.AcquireTimeout)
	}

	stats := pools.Stats()
	if len(stats) != 3 || stats["checkout"].Pool == nil || stats["checkout"].Pool.MaxConns() != 2 {
		t.Errorf("Stats() = %v, want the three classes", stats)
	}

	for _, class := range []string{"payments", "", "Checkout"} {
		p, err := pools.Pool(class)
		if p != nil || !errors.Is(err, pgtx.ErrInvalidArgument) || !strings.Contains(err.Error(), "unknown class") {
			t.Errorf("Pool(%q) = %v, %v, want nil and an unknown-class ErrInvalidArgument", class, p, err)
		}
	}

	pools.Close()
	pools.Close() // idempotent
	if p, err := pools.Pool("audit"); p == nil || err != nil {
		t.Errorf("Pool after Close = %v, %v, want the closed pool", p, err)
	}
}

func TestNilPools(t *testing.T) {
	var pools *Pools
	if p, err := pools.Pool("checkout"); p != nil || !errors.Is(err, pgtx.ErrInvalidArgument) {
		t.Errorf("Pool = %v, %v, want nil and an ErrInvalidArgument", p, err)
	}
	if pools.Stats() != nil || pools.Names() != nil {
		t.Error("want nil Stats and Names")
	}
	pools.Close() // no panic
}

// TestPoolsBreakers: with a base Breaker, each class's pool has a breaker of
// its own, named after the class.
func TestPoolsBreakers(t *testing.T) {
	tests := []struct {
		name      string
		base      string
		wantNames map[string]string
	}{
		{"named base", "db", map[string]string{"checkout": "db/checkout", "reports": "db/reports"}},
		{"unnamed base", "", map[string]string{"checkout": "checkout", "reports": "reports"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := unreachableConfig(t)
			base.Breaker = &pgtx.BreakerConfig{Name: tt.base}
			pools, err := New(context.Background(), &Config{Base: base, Pools: map[string]PoolConfig{"checkout": {}, "reports": {}}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pools.Close)
			for class, s := range pools.Stats() {
				if s.Breaker == nil || s.Breaker.Name != tt.wantNames[class] {
					t.Errorf("class %q: Breaker = %+v, want one named %q", class, s.Breaker, tt.wantNames[class])
				}
			}
			if base.Breaker.Name != tt.base {
				t.Errorf("base Breaker renamed to %q", base.Breaker.Name)
			}
		})
	}
}
