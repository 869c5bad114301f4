package pgtx

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// unreachableConfig returns a Config whose pools never connect: pgxpool
// opens connections on demand, and CancelModeProtocol has no cancel pool.
func unreachableConfig(t *testing.T) *Config {
	t.Helper()
	cfg, err := ParseConfig("postgres://pgtx@127.0.0.1:1/none?pool_max_conns=6")
	if err != nil {
		t.Fatal(err)
	}
	cfg.CancelMode = CancelModeProtocol
	return cfg
}

func TestNewBulkheadsInvalid(t *testing.T) {
	replaced := unreachableConfig(t)
	replaced.Config = replaced.Config.Copy()
	badBase := unreachableConfig(t)
	badBase.CommitTimeout = -1
	tests := []struct {
		name    string
		base    *Config
		classes map[string]BulkheadClass
		want    string
	}{
		{"nil base", nil, map[string]BulkheadClass{"a": {}}, "nil Config"},
		{"base not from ParseConfig", &Config{}, map[string]BulkheadClass{"a": {}}, "ParseConfig"},
		{"base Config replaced", replaced, map[string]BulkheadClass{"a": {}}, "replaced"},
		{"invalid base", badBase, map[string]BulkheadClass{"a": {}}, "CommitTimeout"},
		{"no classes", unreachableConfig(t), nil, "at least one class"},
		{"empty classes", unreachableConfig(t), map[string]BulkheadClass{}, "at least one class"},
		{"empty name", unreachableConfig(t), map[string]BulkheadClass{"a": {}, "": {}}, "name must not be empty"},
		{"negative MaxConns", unreachableConfig(t), map[string]BulkheadClass{"a": {}, "b": {MaxConns: -1}}, `"b": MaxConns`},
		{"negative MaxWaiters", unreachableConfig(t), map[string]BulkheadClass{"a": {MaxWaiters: -2}}, `"a": MaxWaiters`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBulkheads(context.Background(), tt.base, tt.classes)
			if b != nil {
				b.Close()
				t.Fatal("got Bulkheads, want nil")
			}
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalidArgument saying %q", err, tt.want)
			}
		})
	}
}

func TestBulkheads(t *testing.T) {
	base := unreachableConfig(t)
	base.MinConns = 3
	base.AcquireTimeout = 700 * time.Millisecond
	base.MaxWaiters = 9
	b, err := NewBulkheads(context.Background(), base, map[string]BulkheadClass{
		"checkout": {MaxConns: 2, MaxWaiters: 4, AcquireTimeout: 100 * time.Millisecond},
		"reports":  {AcquireTimeout: -1},
		"audit":    {MaxConns: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)

	if got, want := b.Classes(), []string{"audit", "checkout", "reports"}; !slices.Equal(got, want) {
		t.Errorf("Classes() = %q, want %q", got, want)
	}
	tests := []struct {
		class          string
		maxConns       int32
		minConns       int32
		maxWaiters     int64
		acquireTimeout time.Duration
	}{
		{"checkout", 2, 2, 4, 100 * time.Millisecond},
		{"reports", 6, 3, 9, -1},
		{"audit", 1, 1, 9, 700 * time.Millisecond},
	}
	pools := map[*Pool]bool{}
	for _, tt := range tests {
		t.Run(tt.class, func(t *testing.T) {
			p, err := b.Pool(tt.class)
			if err != nil {
				t.Fatal(err)
			}
			pools[p] = true
			if got := p.Stat().MaxConns(); got != tt.maxConns {
				t.Errorf("MaxConns = %d, want %d", got, tt.maxConns)
			}
			if got := p.Config().MinConns; got != tt.minConns {
				t.Errorf("MinConns = %d, want %d (capped at MaxConns)", got, tt.minConns)
			}
			if got := p.queue.maxWaiters; got != tt.maxWaiters {
				t.Errorf("MaxWaiters = %d, want %d", got, tt.maxWaiters)
			}
			if got := p.settings.acquireTimeout; got != tt.acquireTimeout {
				t.Errorf("AcquireTimeout = %v, want %v", got, tt.acquireTimeout)
			}
		})
	}
	if len(pools) != len(tests) {
		t.Errorf("%d distinct pools for %d classes", len(pools), len(tests))
	}
	if base.MaxConns != 6 || base.MinConns != 3 || base.MaxWaiters != 9 || base.AcquireTimeout != 700*time.Millisecond {
		t.Errorf("base modified: MaxConns %d, MinConns %d, MaxWaiters %d, AcquireTimeout %v",
			base.MaxConns, base.MinConns, base.MaxWaiters, base.AcquireTimeout)
	}

	stats := b.Stats()
	if len(stats) != 3 || stats["checkout"].Pool == nil || stats["checkout"].Pool.MaxConns() != 2 {
		t.Errorf("Stats() = %v, want the three classes", stats)
	}

	for _, class := range []string{"payments", "", "Checkout"} {
		p, err := b.Pool(class)
		if p != nil || !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "unknown bulkhead class") {
			t.Errorf("Pool(%q) = %v, %v, want nil and an unknown-class ErrInvalidArgument", class, p, err)
		}
	}
	var nilB *Bulkheads
	if p, err := nilB.Pool("checkout"); p != nil || !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil Bulkheads: Pool = %v, %v, want an ErrInvalidArgument", p, err)
	}
	nilB.Close() // no panic
	if nilB.Stats() != nil || nilB.Classes() != nil {
		t.Error("nil Bulkheads: want nil Stats and Classes")
	}

	b.Close()
	b.Close() // idempotent
}
