package pgtx

import (
	"context"
	"testing"
)

// TestRecentCommitsSwitch: a resolving pool keeps its acknowledged
// commits by default; RecentCommits -1, or resolution off, keeps none and
// asks nothing.
func TestRecentCommitsSwitch(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		wantOn bool
	}{
		{"default", func(*Config) {}, true},
		{"a size of its own", func(c *Config) { c.RecentCommits = 10 }, true},
		{"RecentCommits -1", func(c *Config) { c.RecentCommits = -1 }, false},
		{"resolution off", func(c *Config) { c.ResolveTimeout = -1 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, unreachableDSN)
			tt.mutate(cfg)
			p, err := NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			if on := p.acked != nil; on != tt.wantOn {
				t.Fatalf("kept: %v, want %v", on, tt.wantOn)
			}
			if s := p.Stats(); s.LostCommitCount|s.UnprovenCommitCount|s.SurvivedCommitCount != 0 {
				t.Errorf("a new pool counts %+v", s)
			}
		})
	}
}
