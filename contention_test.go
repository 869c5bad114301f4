package pgtx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/internal/contention"
	"github.com/pgtx-go/pgtx/internal/fakeclock"
	"github.com/pgtx-go/pgtx/internal/histogram"
)

// recordingContention records the manager's events.
type recordingContention struct {
	TransactionTracer
	events []TraceContentionData
}

func (r *recordingContention) TraceContention(_ context.Context, d TraceContentionData) {
	r.events = append(r.events, d)
}

// limitingGate returns a pool's manager on c, with tracer, whose gate of
// label limits to one attempt at once: driven there as a pool's would be,
// by an open window of attempts that all conflicted. Its one attempt under
// the limit took mean, the label's mean attempt time from then on.
func limitingGate(t *testing.T, c clock, tracer TransactionTracer, label string, mean time.Duration) (*contention.Manager, *contention.Gate) {
	t.Helper()
	m := newContention(ContentionConfig{}, c, 4, 0, tracer)
	g := m.Gate(label)
	ctx := context.Background()
	for n := 0; !g.Limiting(); n++ {
		if n == 1000 {
			t.Fatal("the gate does not limit after 1000 conflicts in a row")
		}
		a, err := g.Admit(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		g.Done(ctx, a, contention.Conflict, 0)
	}
	a, err := g.Admit(ctx, 0, 0)
	if err != nil || !a.Held || a.Limit != 1 {
		t.Fatalf("admit at the gate that limits: %+v, %v; want a slot of a limit of 1", a, err)
	}
	g.Done(ctx, a, contention.Committed, mean)
	return m, g
}

// TestContentionSettings: the pool resolves its ContentionConfig, its size,
// its acquire timeout and its tracer to the manager's settings.
func TestContentionSettings(t *testing.T) {
	tests := []struct {
		name           string
		threshold      float64
		maxConns       int
		acquireTimeout time.Duration
		tracer         TransactionTracer
		want           contention.Settings
	}{
		{name: "defaults", maxConns: 8, want: contention.Settings{Threshold: defaultContentionThreshold, MaxLimit: 8}},
		{name: "a threshold", threshold: 0.5, maxConns: 8, want: contention.Settings{Threshold: 0.5, MaxLimit: 8}},
		{name: "no pool size", maxConns: 0, want: contention.Settings{Threshold: defaultContentionThreshold, MaxLimit: 1}},
		{name: "an acquire timeout", maxConns: 2, acquireTimeout: 30 * time.Millisecond,
			want: contention.Settings{Threshold: defaultContentionThreshold, MaxLimit: 2, AcquireTimeout: 30 * time.Millisecond}},
		{name: "a contention tracer", maxConns: 2, tracer: &recordingContention{},
			want: contention.Settings{Threshold: defaultContentionThreshold, MaxLimit: 2}},
		{name: "another tracer", maxConns: 2, tracer: (TransactionTracer)(nil),
			want: contention.Settings{Threshold: defaultContentionThreshold, MaxLimit: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeclock.Clock{}
			s := contentionSettings(ContentionConfig{Threshold: tt.threshold}, clk, tt.maxConns, tt.acquireTimeout, tt.tracer)
			if s.Clock != clock(clk) || s.Threshold != tt.want.Threshold || s.MaxLimit != tt.want.MaxLimit || s.AcquireTimeout != tt.want.AcquireTimeout {
				t.Errorf("settings %+v, want %+v", s, tt.want)
			}
			if err := s.AcquireTimeoutErr; (err != nil) != (tt.acquireTimeout > 0) ||
				err != nil && (!errors.Is(err, ErrAcquireTimeout) || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), tt.acquireTimeout.String())) {
				t.Errorf("acquire timeout error %v, want ErrAcquireTimeout with the timeout, and only with one", err)
			}
			if _, ok := tt.tracer.(ContentionTracer); (s.OnLimit != nil) != ok {
				t.Errorf("OnLimit set %v, want %v: only a ContentionTracer gets the events", s.OnLimit != nil, ok)
			}
		})
	}
	if m := newContention(ContentionConfig{Threshold: -1}, &fakeclock.Clock{}, 8, 0, nil); m != nil {
		t.Error("a negative threshold must switch the manager off")
	}
}

// TestContentionTracerAndStats: a change of limit reaches the tracer as
// TraceContentionData, and the manager's state reaches Stats as
// ContentionStats, the empty label first.
func TestContentionTracerAndStats(t *testing.T) {
	tr := &recordingContention{}
	m, g := limitingGate(t, &fakeclock.Clock{T: time.Unix(1000, 0)}, tr, "x", time.Millisecond)
	want := TraceContentionData{Label: "x", Limiting: true, Limit: 1, ConflictRatio: 1}
	if len(tr.events) != 1 || tr.events[0] != want {
		t.Errorf("events %+v, want %+v", tr.events, want)
	}
	ctx := context.Background()
	hold, _ := g.Admit(ctx, 0, 0)
	s := contentionStats(m)
	if len(s) != 2 || s[0].Label != "" || s[0].AttemptCount != 0 {
		t.Fatalf("stats %+v, want the empty label, then x", s)
	}
	x := s[1]
	x.Wait = Histogram{}
	if want := (ContentionStats{Label: "x", Limiting: true, Limit: 1, Running: 1,
		AttemptCount: 201, ConflictCount: 200, CommitCount: 1}); fmt.Sprint(x) != fmt.Sprint(want) {
		t.Errorf("stats of x %+v, want %+v", x, want)
	}
	if w := s[1].Wait; w.Count != 2 || len(w.Bounds) != len(histogram.Bounds) || len(w.Buckets) != len(histogram.Bounds)+1 {
		t.Errorf("waits %+v, want the two admissions under the limit", w)
	}
	g.Done(ctx, hold, contention.Committed, time.Millisecond)
}
