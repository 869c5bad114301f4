package pgtx

import (
	"context"
	"errors"
	"fmt"
	"github.com/jackc/pgerrcode"
	"io"
	"testing"
	"time"
)

type stateRecorder struct{ changes []TraceBreakerStateChangeData }

func (r *stateRecorder) TraceBreakerStateChange(_ context.Context, d TraceBreakerStateChangeData) {
	r.changes = append(r.changes, d)
}

// fakeBreaker returns a breaker on a fake clock, recording its changes.
func fakeBreaker(t *testing.T, cfg BreakerConfig) (*breaker, *fakeClock, *stateRecorder) {
	t.Helper()
	rec := &stateRecorder{}
	cfg.Tracer = rec
	clk := &fakeClock{now: time.Unix(1000, 0)}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	return newBreaker(cfg, clk), clk, rec
}

// call runs one call through b that takes d on the fake clock and ends
// with err.
func call(b *breaker, clk *fakeClock, ctx context.Context, d time.Duration, err error) error {
	return b.do(ctx, func(context.Context) error {
		clk.now = clk.now.Add(d)
		return err
	})
}

var (
	errLost    = fmt.Errorf("read: %w", io.ErrUnexpectedEOF)
	errTimeout = pgErr(pgerrcode.QueryCanceled)
)

func TestBreakerConsecutiveFailures(t *testing.T) {
	b, clk, rec := fakeBreaker(t, BreakerConfig{Name: "replica", ConsecutiveFailures: 3, FailureRatio: -1, SlowCallRatio: -1})
	ctx := context.Background()
	for range 2 {
		_ = call(b, clk, ctx, time.Millisecond, errLost)
	}
	_ = call(b, clk, ctx, time.Millisecond, nil) // a success resets the run
	for range 2 {
		_ = call(b, clk, ctx, time.Millisecond, errLost)
	}
	if b.State() != BreakerClosed {
		t.Fatal("opened before 3 failures in a row")
	}
	_ = call(b, clk, ctx, time.Millisecond, errTimeout)
	if b.State() != BreakerOpen {
		t.Fatal("did not open after 3 failures in a row")
	}
	if len(rec.changes) != 1 || rec.changes[0].To != BreakerOpen || rec.changes[0].Name != "replica" {
		t.Errorf("changes = %+v", rec.changes)
	}
}

func TestBreakerTransitions(t *testing.T) {
	b, clk, rec := fakeBreaker(t, BreakerConfig{ConsecutiveFailures: 2, OpenFor: 5 * time.Second, HalfOpenProbes: 2})
	ctx := context.Background()
	ran := 0
	probe := func(err error) error {
		return b.do(ctx, func(context.Context) error { ran++; clk.now = clk.now.Add(time.Millisecond); return err })
	}

	_, _ = probe(errLost), probe(errLost)
	if b.State() != BreakerOpen {
		t.Fatal("closed -> open: did not open")
	}
	// open: refused at once, fn not run.
	ran = 0
	if err := probe(nil); !errors.Is(err, ErrCircuitOpen) || ran != 0 {
		t.Fatalf("open: err = %v, ran %d; want ErrCircuitOpen without running", err, ran)
	}
	// open -> half-open after OpenFor.
	clk.now = clk.now.Add(5 * time.Second)
	if b.State() != BreakerHalfOpen {
		t.Fatal("open -> half-open: did not move after OpenFor")
	}
	// half-open: 2 probes admitted, a 3rd concurrent one refused.
	t1, err1 := b.allow(context.Background())
	t2, err2 := b.allow(context.Background())
	_, err3 := b.allow(context.Background())
	if err1 != nil || err2 != nil || !errors.Is(err3, ErrCircuitOpen) {
		t.Fatalf("half-open admission: %v %v %v", err1, err2, err3)
	}
	// half-open -> open: a probe fails.
	b.record(context.Background(), t1, b.judge(ctx, errLost, time.Millisecond))
	if b.State() != BreakerOpen {
		t.Fatal("half-open -> open: a failed probe did not reopen")
	}
	b.record(context.Background(), t2, b.judge(ctx, nil, time.Millisecond)) // stale: admitted before the change
	if b.State() != BreakerOpen {
		t.Fatal("a stale probe changed the state")
	}
	// half-open -> closed: both probes succeed.
	clk.now = clk.now.Add(5 * time.Second)
	if err := probe(nil); err != nil || b.State() != BreakerHalfOpen {
		t.Fatalf("first probe: err %v, state %v; want half-open until both succeed", err, b.State())
	}
	if err := probe(nil); err != nil || b.State() != BreakerClosed {
		t.Fatalf("second probe: err %v, state %v; want closed", err, b.State())
	}
	want := []BreakerState{BreakerOpen, BreakerHalfOpen, BreakerOpen, BreakerHalfOpen, BreakerClosed}
	if len(rec.changes) != len(want) {
		t.Fatalf("changes = %+v", rec.changes)
	}
	for i, w := range want {
		if rec.changes[i].To != w {
			t.Errorf("change %d to %v, want %v (%s)", i, rec.changes[i].To, w, rec.changes[i].Reason)
		}
	}
	s := b.stats()
	if s.OpenedCount != 2 || s.RejectedCount != 2 || s.CallCount != 0 {
		t.Errorf("stats = %+v: opened 2, rejected 2, a fresh window after closing", s)
	}
}

func TestBreakerSlowProbeReopens(t *testing.T) {
	b, clk, _ := fakeBreaker(t, BreakerConfig{ConsecutiveFailures: 1, SlowCallThreshold: 100 * time.Millisecond})
	ctx := context.Background()
	_ = call(b, clk, ctx, time.Millisecond, errLost)
	clk.now = clk.now.Add(defaultBreakerOpenFor)
	if err := call(b, clk, ctx, 200*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if b.State() != BreakerOpen {
		t.Errorf("a slow successful probe must reopen the breaker, state %v", b.State())
	}
}

func TestBreakerRatios(t *testing.T) {
	tests := []struct {
		name     string
		cfg      BreakerConfig
		calls    func(b *breaker, clk *fakeClock)
		wantOpen bool
	}{
		{"failure ratio reached", BreakerConfig{ConsecutiveFailures: -1, MinCalls: 10, FailureRatio: 0.5, SlowCallRatio: -1},
			func(b *breaker, clk *fakeClock) {
				for i := range 10 {
					err := error(nil)
					if i%2 == 0 {
						err = errLost
					}
					_ = call(b, clk, context.Background(), time.Millisecond, err)
				}
			}, true},
		{"failure ratio below MinCalls", BreakerConfig{ConsecutiveFailures: -1, MinCalls: 10, FailureRatio: 0.5, SlowCallRatio: -1},
			func(b *breaker, clk *fakeClock) {
				for range 9 {
					_ = call(b, clk, context.Background(), time.Millisecond, errLost)
				}
			}, false},
		{"failures age out of the window", BreakerConfig{ConsecutiveFailures: -1, MinCalls: 10, FailureRatio: 0.5, SlowCallRatio: -1, Window: 10 * time.Second},
			func(b *breaker, clk *fakeClock) {
				for range 5 {
					_ = call(b, clk, context.Background(), time.Millisecond, errLost)
				}
				clk.now = clk.now.Add(11 * time.Second)
				for range 6 {
					_ = call(b, clk, context.Background(), time.Millisecond, nil)
				}
			}, false},
		{"slow-call ratio: slow successes open it", BreakerConfig{ConsecutiveFailures: -1, FailureRatio: -1, MinCalls: 10, SlowCallRatio: 0.5, SlowCallThreshold: 100 * time.Millisecond},
			func(b *breaker, clk *fakeClock) {
				for i := range 10 {
					d := time.Millisecond
					if i%2 == 1 {
						d = 150 * time.Millisecond
					}
					_ = call(b, clk, context.Background(), d, nil)
				}
			}, true},
		{"slow-call ratio below threshold", BreakerConfig{ConsecutiveFailures: -1, FailureRatio: -1, MinCalls: 10, SlowCallRatio: 0.5, SlowCallThreshold: 100 * time.Millisecond},
			func(b *breaker, clk *fakeClock) {
				for i := range 10 {
					d := time.Millisecond
					if i < 4 {
						d = 150 * time.Millisecond
					}
					_ = call(b, clk, context.Background(), d, nil)
				}
			}, false},
		{"slow rule off", BreakerConfig{ConsecutiveFailures: -1, FailureRatio: -1, SlowCallRatio: -1, SlowCallThreshold: time.Millisecond},
			func(b *breaker, clk *fakeClock) {
				for range 50 {
					_ = call(b, clk, context.Background(), time.Second, nil)
				}
			}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, clk, _ := fakeBreaker(t, tt.cfg)
			tt.calls(b, clk)
			if got := b.State() == BreakerOpen; got != tt.wantOpen {
				t.Errorf("open = %v, want %v (stats %+v)", got, tt.wantOpen, b.stats())
			}
		})
	}
}

// TestBreakerExclusions: the caller's cancellation, conflicts and permanent
// errors are not counted at all; deadline and statement timeouts, lost
// connections, overload and acquire timeouts are failures.
func TestBreakerExclusions(t *testing.T) {
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
		{"conflict", context.Background(), pgErr(pgerrcode.SerializationFailure), false, false},
		{"unique violation", context.Background(), pgErr("23505"), false, false},
		{"syntax", context.Background(), pgErr("42601"), false, false},
		{"caller's own error", context.Background(), errors.New("not found"), false, false},
		{"nested open breaker", context.Background(), ErrCircuitOpen, false, false},
		{"deadline", context.Background(), context.DeadlineExceeded, true, true},
		{"statement timeout", context.Background(), pgErr(pgerrcode.QueryCanceled), true, true},
		{"lost connection", context.Background(), errLost, true, true},
		{"ambiguous commit", context.Background(), &commitUnknownError{err: errLost}, true, true},
		{"overload", context.Background(), pgErr(pgerrcode.TooManyConnections), true, true},
		{"acquire timeout", context.Background(), &acquireTimeoutError{timeout: time.Second}, true, true},
		{"queue full", context.Background(), ErrQueueFull, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, clk, _ := fakeBreaker(t, BreakerConfig{ConsecutiveFailures: -1, FailureRatio: -1, SlowCallRatio: -1})
			_ = call(b, clk, tt.ctx, time.Millisecond, tt.err)
			s := b.stats()
			if (s.CallCount == 1) != tt.wantCounted || (s.FailureCount == 1) != tt.wantFailed {
				t.Errorf("calls %d failures %d; want counted %v failed %v", s.CallCount, s.FailureCount, tt.wantCounted, tt.wantFailed)
			}
		})
	}
}

func TestBreakerHalfOpenExcludedProbeFreesItsSlot(t *testing.T) {
	b, clk, _ := fakeBreaker(t, BreakerConfig{ConsecutiveFailures: 1})
	_ = call(b, clk, context.Background(), time.Millisecond, errLost)
	clk.now = clk.now.Add(defaultBreakerOpenFor)
	_ = call(b, clk, context.Background(), time.Millisecond, pgErr("23505")) // tells nothing
	if b.State() != BreakerHalfOpen {
		t.Fatalf("state %v, want still half-open", b.State())
	}
	if err := call(b, clk, context.Background(), time.Millisecond, nil); err != nil || b.State() != BreakerClosed {
		t.Errorf("err %v, state %v: the next probe must be admitted and close it", err, b.State())
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

// TestBreakerNegativeSwitchesOff checks the package's rule on the breaker:
// each negative field switches its rule off.
func TestBreakerNegativeSwitchesOff(t *testing.T) {
	ctx := context.Background()
	t.Run("SlowCallThreshold", func(t *testing.T) {
		b, clk, _ := fakeBreaker(t, BreakerConfig{SlowCallThreshold: -1, ConsecutiveFailures: -1, FailureRatio: -1, MinCalls: 1})
		for range 20 {
			_ = call(b, clk, ctx, time.Hour, nil)
		}
		if b.State() != BreakerClosed {
			t.Errorf("state %v: no call may count as slow", b.State())
		}
	})
	t.Run("Window", func(t *testing.T) {
		b, clk, _ := fakeBreaker(t, BreakerConfig{Window: -1, ConsecutiveFailures: -1, MinCalls: 1})
		for range 20 {
			_ = call(b, clk, ctx, time.Millisecond, errLost)
		}
		if b.State() != BreakerClosed {
			t.Errorf("state %v: without a window the ratio rules are off", b.State())
		}
	})
	t.Run("OpenFor and HalfOpenProbes", func(t *testing.T) {
		b, clk, _ := fakeBreaker(t, BreakerConfig{ConsecutiveFailures: 1, OpenFor: -1, HalfOpenProbes: -1})
		_ = call(b, clk, ctx, time.Millisecond, errLost)
		if s := b.State(); s != BreakerClosed {
			t.Errorf("state %v: with no open period and no probes the breaker closes at once", s)
		}
		if b.stats().OpenedCount != 1 {
			t.Errorf("OpenedCount %d, want 1", b.stats().OpenedCount)
		}
	})
	t.Run("MinCalls", func(t *testing.T) {
		b, clk, _ := fakeBreaker(t, BreakerConfig{MinCalls: -1, ConsecutiveFailures: -1, FailureRatio: 0.5})
		_ = call(b, clk, ctx, time.Millisecond, errLost)
		if b.State() != BreakerOpen {
			t.Errorf("state %v: with no minimum one failure of one call opens it", b.State())
		}
	})
}

func BenchmarkBreakerOpenRejects(b *testing.B) {
	br := newBreaker(BreakerConfig{ConsecutiveFailures: 1, OpenFor: time.Hour}, realClock{})
	_ = br.do(context.Background(), func(context.Context) error { return errLost })
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := br.do(context.Background(), fn); !errors.Is(err, ErrCircuitOpen) {
			b.Fatal(err)
		}
	}
}

type funcBreakerTracer func(context.Context, TraceBreakerStateChangeData)

func (f funcBreakerTracer) TraceBreakerStateChange(ctx context.Context, d TraceBreakerStateChangeData) {
	f(ctx, d)
}

// TestBreakerReportsToBothTracers: the breaker's own tracer and the pool's
// Config.Tracer (when it is a BreakerTracer) both receive a change, once
// each, also when they are the same tracer or cannot be compared.
func TestBreakerReportsToBothTracers(t *testing.T) {
	var a, b int
	ta := funcBreakerTracer(func(context.Context, TraceBreakerStateChangeData) { a++ })
	tb := &stateRecorder{}
	j := joinBreakerTracers(ta, tb)
	j.TraceBreakerStateChange(context.Background(), TraceBreakerStateChangeData{To: BreakerOpen})
	b = len(tb.changes)
	if a != 1 || b != 1 {
		t.Errorf("a %d, b %d: want one change each", a, b)
	}
	if j := joinBreakerTracers(tb, tb); j != BreakerTracer(tb) {
		t.Errorf("the same tracer twice must be reported to once")
	}
	if joinBreakerTracers(nil, tb) != BreakerTracer(tb) || joinBreakerTracers(tb, nil) != BreakerTracer(tb) {
		t.Errorf("a nil tracer must be left out")
	}
}
