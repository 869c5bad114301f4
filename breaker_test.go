package pgtx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	circuit "github.com/pgtx-go/pgtx/internal/breaker"
	"github.com/pgtx-go/pgtx/internal/fakeclock"
)

type stateRecorder struct{ changes []TraceBreakerStateChangeData }

func (r *stateRecorder) TraceBreakerStateChange(_ context.Context, d TraceBreakerStateChangeData) {
	r.changes = append(r.changes, d)
}

var (
	errLost    = fmt.Errorf("read: %w", io.ErrUnexpectedEOF)
	errTimeout = pgErr(pgerrcode.QueryCanceled)
)

// TestBreakerJudge: the caller's cancellation, conflicts and permanent
// errors are not counted at all; deadline and statement timeouts, lost
// connections, overload and acquire timeouts are failures.
func TestBreakerJudge(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name        string
		ctx         context.Context
		err         error
		wantCounted bool
		wantFailed  bool
	}{
		{"success", context.Background(), nil, true, false},
		{"caller cancelled", cancelled, fmt.Errorf("x: %w", context.Canceled), false, false},
		{"cancelled, but the caller's context is not", context.Background(), fmt.Errorf("x: %w", context.Canceled), true, true},
		{"conflict", context.Background(), pgErr(pgerrcode.SerializationFailure), false, false},
		{"unique violation", context.Background(), pgErr("23505"), false, false},
		{"syntax", context.Background(), pgErr("42601"), false, false},
		{"caller's own error", context.Background(), errors.New("not found"), false, false},
		{"nested open breaker", context.Background(), ErrCircuitOpen, false, false},
		{"deadline", context.Background(), context.DeadlineExceeded, true, true},
		{"statement timeout", context.Background(), errTimeout, true, true},
		{"lost connection", context.Background(), errLost, true, true},
		{"ambiguous commit", context.Background(), lostCommit(errLost), true, true},
		{"overload", context.Background(), pgErr(pgerrcode.TooManyConnections), true, true},
		{"unavailable", context.Background(), refusedErr(), true, true},
		{"acquire timeout", context.Background(), &acquireTimeoutError{timeout: time.Second}, true, true},
		{"queue full", context.Background(), ErrQueueFull, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			counted, failed := judgeBreakerCall(tt.ctx, tt.err)
			if counted != tt.wantCounted || failed != tt.wantFailed {
				t.Errorf("counted %v failed %v; want %v %v", counted, failed, tt.wantCounted, tt.wantFailed)
			}
		})
	}
}

// TestBreakerSettings: BreakerConfig's defaults, and each negative field
// switching its rule off, as the state machine receives them.
func TestBreakerSettings(t *testing.T) {
	defaults := circuit.Settings{
		ConsecutiveFailures: 5, FailureRatio: 0.5, SlowCallRatio: 0.5, SlowCallThreshold: time.Second,
		MinCalls: 10, Window: 10 * time.Second, OpenFor: 5 * time.Second, HalfOpenProbes: 1,
	}
	with := func(f func(s *circuit.Settings)) circuit.Settings {
		s := defaults
		f(&s)
		return s
	}
	tests := []struct {
		name string
		cfg  BreakerConfig
		want circuit.Settings
	}{
		{"zero: the defaults", BreakerConfig{}, defaults},
		{"set", BreakerConfig{ConsecutiveFailures: 3, FailureRatio: 0.25, SlowCallRatio: 0.75, SlowCallThreshold: time.Minute, MinCalls: 20, Window: time.Minute, OpenFor: time.Hour, HalfOpenProbes: 4},
			circuit.Settings{ConsecutiveFailures: 3, FailureRatio: 0.25, SlowCallRatio: 0.75, SlowCallThreshold: time.Minute, MinCalls: 20, Window: time.Minute, OpenFor: time.Hour, HalfOpenProbes: 4}},
		{"negative: off", BreakerConfig{ConsecutiveFailures: -1, FailureRatio: -1, SlowCallRatio: -1, SlowCallThreshold: -1, MinCalls: -1, OpenFor: -1, HalfOpenProbes: -1},
			circuit.Settings{Window: 10 * time.Second}},
		{"no window: the ratio rules are off", BreakerConfig{Window: -1},
			with(func(s *circuit.Settings) { s.FailureRatio, s.SlowCallRatio, s.Window = 0, 0, time.Second })},
		{"a narrow window is widened to a second", BreakerConfig{Window: time.Millisecond},
			with(func(s *circuit.Settings) { s.Window = time.Second })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := breakerSettings(tt.cfg)
			if got.Judge == nil || got.ErrOpen != ErrCircuitOpen || got.OnChange != nil {
				t.Errorf("Judge set %v, ErrOpen %v, OnChange set %v: want judgeBreakerCall, ErrCircuitOpen and no callback", got.Judge != nil, got.ErrOpen, got.OnChange != nil)
			}
			got.Judge, got.ErrOpen = nil, nil
			if !reflect.DeepEqual(got, tt.want) { // the funcs are nil: equal
				t.Errorf("settings %+v\nwant     %+v", got, tt.want)
			}
		})
	}
}

// TestBreakerStatesMatch: breakerState converts by value, which holds
// while the two enums list the states in the same order.
func TestBreakerStatesMatch(t *testing.T) {
	for s, want := range map[circuit.State]BreakerState{circuit.Closed: BreakerClosed, circuit.HalfOpen: BreakerHalfOpen, circuit.Open: BreakerOpen} {
		if got := breakerState(s); got != want {
			t.Errorf("breakerState(%d) = %v, want %v", s, got, want)
		}
	}
}

// TestBreakerWiring: the pool's breaker refuses with ErrCircuitOpen itself,
// and names its state changes and its stats.
func TestBreakerWiring(t *testing.T) {
	rec := &stateRecorder{}
	clk := &fakeclock.Clock{T: time.Unix(1000, 0)}
	b := newBreaker(&BreakerConfig{Name: "replica", ConsecutiveFailures: 2, Tracer: rec}, nil, clk)
	ctx := context.Background()
	for _, err := range []error{errLost, errTimeout} {
		if got := b.do(ctx, func(context.Context) error { clk.T = clk.T.Add(time.Millisecond); return err }); got != err {
			t.Fatalf("do = %v, want the call's own error %v", got, err)
		}
	}
	ran := false
	if err := b.do(ctx, func(context.Context) error { ran = true; return nil }); err != ErrCircuitOpen || ran {
		t.Errorf("open: err %v, ran %v; want ErrCircuitOpen itself, without running", err, ran)
	}
	if s := b.State(); s != BreakerOpen {
		t.Errorf("State = %v, want open", s)
	}
	want := TraceBreakerStateChangeData{Name: "replica", From: BreakerClosed, To: BreakerOpen, Reason: "2 consecutive failures", Calls: 2, Failures: 2}
	if len(rec.changes) != 1 || rec.changes[0] != want {
		t.Errorf("changes %+v, want [%+v]", rec.changes, want)
	}
	wantStats := BreakerStats{Name: "replica", State: BreakerOpen, CallCount: 2, FailureCount: 2, RejectedCount: 1, OpenedCount: 1}
	if s := b.stats(); s != wantStats {
		t.Errorf("stats %+v, want %+v", s, wantStats)
	}
}

// TestBreakerThroughPool: a pool with a Breaker counts its calls' outcomes,
// refuses calls once it opened, and reports the change to its
// BreakerConfig.Tracer and to a Config.Tracer that is a BreakerTracer.
func TestBreakerThroughPool(t *testing.T) {
	own := &stateRecorder{}
	pools := &struct {
		recordingTracer
		stateRecorder
	}{}
	cfg := mustParse(t, unreachableDSN)
	cfg.Breaker = &BreakerConfig{Name: "analytics", ConsecutiveFailures: 1, OpenFor: time.Hour, Tracer: own}
	cfg.Tracer = pools
	p, err := NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if s := p.BreakerState(); s != BreakerClosed {
		t.Fatalf("new pool: breaker %v", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	t.Cleanup(cancel)
	fn := func(context.Context, pgx.Tx) error { t.Error("fn ran"); return nil }
	if err := Transaction(ctx, p, ReadCommitted, fn); err == nil || errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("the unreachable server's call: err %v, want its failure", err)
	}
	if err := Transaction(context.Background(), p, ReadCommitted, fn); !errors.Is(err, ErrCircuitOpen) {
		t.Errorf("once open: err %v, want ErrCircuitOpen", err)
	}
	if s := p.BreakerState(); s != BreakerOpen {
		t.Errorf("BreakerState = %v, want open", s)
	}
	for name, changes := range map[string][]TraceBreakerStateChangeData{"BreakerConfig.Tracer": own.changes, "Config.Tracer": pools.changes} {
		if len(changes) != 1 || changes[0].Name != "analytics" || changes[0].To != BreakerOpen {
			t.Errorf("%s: changes %+v, want the one to open, named", name, changes)
		}
	}
	bs := p.Stats().Breaker
	if bs == nil || bs.Name != "analytics" || bs.State != BreakerOpen || bs.FailureCount != 1 || bs.RejectedCount != 1 || bs.OpenedCount != 1 {
		t.Errorf("Stats().Breaker = %+v", bs)
	}
	if s := newTestPool(t).Stats().Breaker; s != nil {
		t.Errorf("a pool without a breaker: Stats().Breaker = %+v, want nil", s)
	}
}

func TestBreakerConfigValidation(t *testing.T) {
	for _, cfg := range []BreakerConfig{{FailureRatio: 1.5}, {SlowCallRatio: 2}} {
		if err := cfg.validate(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: err = %v", cfg, err)
		}
	}
	cfg := mustParse(t, unreachableDSN)
	cfg.Breaker = &BreakerConfig{FailureRatio: 3}
	if _, err := NewWithConfig(context.Background(), cfg); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("pool with a bad breaker: err = %v", err)
	}
}

type funcBreakerTracer func(context.Context, TraceBreakerStateChangeData)

func (f funcBreakerTracer) TraceBreakerStateChange(ctx context.Context, d TraceBreakerStateChangeData) {
	f(ctx, d)
}

// poolBreakerTracer is a pool's Config.Tracer that is a BreakerTracer.
type poolBreakerTracer struct {
	TransactionTracer
	BreakerTracer
}

// TestBreakerReportsToBothTracers: the breaker's own tracer and the pool's
// Config.Tracer (when it is a BreakerTracer) both receive a change, once
// each; a tracer that is both receives it once, and two that cannot be
// compared are taken as two. A pool without a BreakerConfig has no
// breaker.
func TestBreakerReportsToBothTracers(t *testing.T) {
	var calls int
	fn := funcBreakerTracer(func(context.Context, TraceBreakerStateChangeData) { calls++ })
	both := &struct {
		recordingTracer
		stateRecorder
	}{}
	rec := &stateRecorder{}
	tests := []struct {
		name      string
		own       BreakerTracer
		pool      TransactionTracer
		wantRec   int // changes rec or both received
		wantCalls int // fn's
	}{
		{"its own and the pool's", fn, poolBreakerTracer{BreakerTracer: rec}, 1, 1},
		{"its own only", rec, &recordingTracer{}, 1, 0},
		{"the pool's only", nil, poolBreakerTracer{BreakerTracer: rec}, 1, 0},
		{"none", nil, &recordingTracer{}, 0, 0},
		{"one that is both", both, both, 1, 0},
		{"two that cannot be compared", poolBreakerTracer{BreakerTracer: fn}, poolBreakerTracer{BreakerTracer: fn}, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls, rec.changes, both.changes = 0, nil, nil
			b := newBreaker(&BreakerConfig{Tracer: tt.own}, tt.pool, &fakeclock.Clock{})
			b.report(context.Background(), circuit.Change{To: circuit.Open})
			if got := len(rec.changes) + len(both.changes); got != tt.wantRec || calls != tt.wantCalls {
				t.Errorf("%d changes recorded, %d calls; want %d, %d", got, calls, tt.wantRec, tt.wantCalls)
			}
		})
	}
	if b := newBreaker(nil, both, &fakeclock.Clock{}); b != nil {
		t.Error("a breaker without a BreakerConfig")
	}
}
