package pgtx

import (
	"context"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/internal/cancel"
)

// TestCancelModesMatch: cancelMode converts by value, which holds while the
// two enums list the modes in the same order.
func TestCancelModesMatch(t *testing.T) {
	for m, want := range map[CancelMode]cancel.Mode{CancelModePool: cancel.ModePool, CancelModeProtocol: cancel.ModeProtocol, CancelModeClose: cancel.ModeClose} {
		if got := cancelMode(m); got != want {
			t.Errorf("cancelMode(%v) = %d, want %d", m, got, want)
		}
	}
}

// cancelRecorder records the cancellations a tracer receives.
type cancelRecorder struct {
	TransactionTracer
	got []TraceCancelData
}

func (r *cancelRecorder) TraceCancel(_ context.Context, d TraceCancelData) { r.got = append(r.got, d) }

// TestCancelTracing: a finished cancellation reaches the CancelTracer as
// TraceCancelData, in the pool's mode; a tracer that is not one gets
// nothing. (internal/cancel counts the cancellation and its latency.)
func TestCancelTracing(t *testing.T) {
	rec := &cancelRecorder{}
	finished := cancelTracing(rec, CancelModeProtocol)
	tests := []struct {
		r    cancel.Result
		want TraceCancelData
	}{
		{cancel.Result{PID: 7, Outcome: cancel.Protocol, Latency: time.Millisecond},
			TraceCancelData{PID: 7, Mode: CancelModeProtocol, Latency: time.Millisecond}},
		{cancel.Result{PID: 7, Outcome: cancel.Signalled, Latency: time.Millisecond},
			TraceCancelData{PID: 7, Mode: CancelModeProtocol, Latency: time.Millisecond}},
		{cancel.Result{PID: 8, Outcome: cancel.NotFound, Latency: 2 * time.Millisecond},
			TraceCancelData{PID: 8, Mode: CancelModeProtocol, NotFound: true, Latency: 2 * time.Millisecond}},
		{cancel.Result{PID: 9, Outcome: cancel.Closed, FellBack: true, Latency: 3 * time.Millisecond},
			TraceCancelData{PID: 9, Mode: CancelModeProtocol, Closed: true, FellBack: true, Latency: 3 * time.Millisecond}},
	}
	for i, tt := range tests {
		finished(context.Background(), tt.r)
		if len(rec.got) != i+1 || rec.got[i] != tt.want {
			t.Fatalf("%+v: traced %+v, want %+v", tt.r, rec.got, tt.want)
		}
	}
	if cancelTracing(&recordingTracer{}, CancelModePool) != nil || cancelTracing(nil, CancelModePool) != nil {
		t.Error("a tracer that is not a CancelTracer must get no cancellations")
	}
}

// TestCancelStats: the canceller's counters and latencies reach Stats, and
// CancelModePool's cancel pool too.
func TestCancelStats(t *testing.T) {
	for _, mode := range []CancelMode{CancelModePool, CancelModeProtocol, CancelModeClose} {
		cfg := mustParse(t, unreachableDSN)
		cfg.CancelMode = mode
		p, err := NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := p.Stats()
		c := s.Cancels
		if c.SentCount+c.SignalledCount+c.NotFoundCount+c.PoolErrorCount+c.ProtocolCount+c.ClosedCount != 0 ||
			c.Latency.Count != 0 || len(c.Latency.Bounds) == 0 || len(c.Latency.Buckets) != len(c.Latency.Bounds)+1 {
			t.Errorf("%v: cancels %+v, want none, in an empty histogram", mode, s.Cancels)
		}
		if (s.CancelPool != nil) != (mode == CancelModePool) {
			t.Errorf("%v: cancel pool stats %v, want them in CancelModePool only", mode, s.CancelPool)
		}
		p.Close()
	}
}

// TestCancelPoolSettings: the cancel pool's connect timeout and its
// sessions' statement_timeout follow Config's rule (0: the default,
// negative: off), and a negative StatementTimeout sends none.
func TestCancelPoolSettings(t *testing.T) {
	tests := []struct {
		name           string
		set            func(*Config)
		wantConnect    time.Duration
		wantStatement  string
		wantStatements bool
	}{
		{"defaults", func(*Config) {}, defaultCancelConnectTimeout, "2000", true},
		{"a grace of its own", func(c *Config) { c.CancelGrace = 1500 * time.Microsecond }, defaultCancelConnectTimeout, "2", true},
		{"the grace off", func(c *Config) { c.CancelGrace = -1 }, defaultCancelConnectTimeout, "", false},
		{"no startup parameters", func(c *Config) { c.StatementTimeout = -1 }, defaultCancelConnectTimeout, "", false},
		{"a connect timeout of its own", func(c *Config) { c.CancelConnectTimeout = 3 * time.Second }, 3 * time.Second, "2000", true},
		{"no connect timeout", func(c *Config) { c.CancelConnectTimeout = -1 }, 0, "2000", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, unreachableDSN)
			tt.set(cfg)
			cp, err := cancel.PoolConfig(cancelPoolSettings(cfg, cfg.Config))
			if err != nil {
				t.Fatal(err)
			}
			v, ok := cp.ConnConfig.RuntimeParams["statement_timeout"]
			if cp.ConnConfig.ConnectTimeout != tt.wantConnect || v != tt.wantStatement || ok != tt.wantStatements {
				t.Errorf("connect timeout %v, statement_timeout %q (sent %v); want %v, %q (%v)",
					cp.ConnConfig.ConnectTimeout, v, ok, tt.wantConnect, tt.wantStatement, tt.wantStatements)
			}
			if cp.ConnConfig.RuntimeParams["client_encoding"] != "UTF8" {
				t.Error("the cancel pool's sessions do not ask for UTF8")
			}
		})
	}
}
