package pgtx

import (
	"context"
	"errors"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/pgtx-go/pgtx/internal/fakeclock"
	"github.com/pgtx-go/pgtx/internal/retry"
)

// TestRetryBudgetDefaults: the pool's budget is internal/retry's with
// RetryConfig's defaults applied (ratio 0.2, 10 retries a second, a 10s
// window), each switched off by a negative value; the budget's arithmetic is
// tested in internal/retry.
func TestRetryBudgetDefaults(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name string
		cfg  RetryConfig
		want *retry.Budget
	}{
		{"zero: the defaults", RetryConfig{}, retry.NewBudget(0.2, 10, 10*time.Second, t0)},
		{"set", RetryConfig{BudgetRatio: 0.5, BudgetMinPerSecond: 3, BudgetWindow: time.Minute}, retry.NewBudget(0.5, 3, time.Minute, t0)},
		{"no floor", RetryConfig{BudgetMinPerSecond: -1}, retry.NewBudget(0.2, 0, 10*time.Second, t0)},
		{"no window", RetryConfig{BudgetWindow: -1}, retry.NewBudget(0.2, 10, -1, t0)},
		{"off", RetryConfig{BudgetRatio: -1}, nil},
	}
	for _, tt := range tests {
		if got := newRetryBudget(tt.cfg, t0); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestRetryBudgetValidate(t *testing.T) {
	for _, b := range []RetryConfig{{BudgetRatio: math.NaN()}, {BudgetMinPerSecond: math.NaN()}} {
		if err := b.validate(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: err = %v", b, err)
		}
	}
}

// TestBudgetInLoop: overload and lost-connection retries draw on the budget;
// when it is spent the call returns the last error at once, marked; conflict
// retries never draw on it.
func TestBudgetInLoop(t *testing.T) {
	overload, conflict := pgErr(pgerrcode.TooManyConnections), pgErr(pgerrcode.SerializationFailure)
	t0 := time.Unix(1000, 0)
	newBudgetLoop := func(b *retry.Budget) *retryLoop {
		p := RetryConfig{Jitter: constJitter(0), MaxAdaptiveRetries: 5}.withDefaults()
		return &retryLoop{policy: &p, clock: &fakeclock.Clock{T: t0}, maxRetries: p.MaxRetries, budget: b}
	}
	empty := func() *retry.Budget {
		b := newRetryBudget(RetryConfig{BudgetMinPerSecond: -1}, t0)
		return b
	}

	calls := 0
	err := newBudgetLoop(empty()).run(context.Background(), scripted(&calls, overload, overload))
	if !errors.Is(err, ErrRetryBudgetExhausted) || sqlState(err) != pgerrcode.TooManyConnections || calls != 1 {
		t.Errorf("overload with an empty budget: err = %v, attempts %d; want the marked 53300 after 1", err, calls)
	}

	calls = 0
	err = newBudgetLoop(empty()).run(context.Background(), scripted(&calls, repeat(conflict, 5)...))
	if err != nil || calls != 6 {
		t.Errorf("conflicts with an empty budget: err = %v, attempts %d; want success after 6", err, calls)
	}

	calls = 0
	b := newRetryBudget(RetryConfig{BudgetMinPerSecond: -1}, t0)
	for range 10 {
		b.Success(t0)
	}
	err = newBudgetLoop(b).run(context.Background(), scripted(&calls, repeat(overload, 5)...))
	if !errors.Is(err, ErrRetryBudgetExhausted) || calls != 3 {
		t.Errorf("10 successes pay for 2 retries: err = %v, attempts %d; want refused after 3", err, calls)
	}
}

// countingTracer counts every event; safe for concurrent use.
type countingTracer struct {
	mu                                           sync.Mutex
	calls, callEnds, starts, ends, retries, refs int
	cancels                                      int
}

func (c *countingTracer) TraceTransactionStart(ctx context.Context, _ TraceTransactionStartData) context.Context {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	return ctx
}

func (c *countingTracer) TraceTransactionEnd(context.Context, TraceTransactionEndData) {
	c.mu.Lock()
	c.callEnds++
	c.mu.Unlock()
}

func (c *countingTracer) TraceAttemptStart(ctx context.Context, _ TraceAttemptStartData) context.Context {
	c.mu.Lock()
	c.starts++
	c.mu.Unlock()
	return ctx
}

func (c *countingTracer) TraceAttemptEnd(_ context.Context, d TraceAttemptEndData) {
	c.mu.Lock()
	c.ends++
	if d.Retry {
		c.retries++
	}
	if !d.Retry && errors.Is(d.Err, ErrRetryBudgetExhausted) {
		c.refs++
	}
	c.mu.Unlock()
}

func (c *countingTracer) TraceCancel(context.Context, TraceCancelData) {
	c.mu.Lock()
	c.cancels++
	c.mu.Unlock()
}

// TestEventPairing runs every retry path under a counting tracer: starts ==
// ends, call starts == call ends, and retries == attempts - calls.
func TestEventPairing(t *testing.T) {
	overload, conflict, deadlock := pgErr(pgerrcode.TooManyConnections), pgErr(pgerrcode.SerializationFailure), pgErr(pgerrcode.DeadlockDetected)
	lost := pgErr(pgerrcode.AdminShutdown)
	t0 := time.Unix(1000, 0)
	deadlineSoon := func() (context.Context, context.CancelFunc) {
		return context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	}
	paths := []struct {
		name   string
		policy RetryConfig
		budget *retry.Budget
		clock  *fakeclock.Clock
		ctx    func() (context.Context, context.CancelFunc)
		errs   []error
	}{
		{name: "success", errs: nil},
		{name: "conflicts then success", errs: []error{conflict, deadlock}},
		{name: "conflict cap", errs: repeat(conflict, 20)},
		{name: "lost connection then success", errs: []error{lost}},
		{name: "overload cap", errs: repeat(overload, 5)},
		{name: "overload then conflicts", errs: append([]error{overload}, repeat(conflict, 5)...)},
		{name: "permanent", errs: []error{pgErr("23505")}},
		{name: "ambiguous commit", errs: []error{lostCommit(errors.New("eof"))}},
		{name: "budget refusal", budget: newRetryBudget(RetryConfig{BudgetMinPerSecond: -1}, t0), errs: []error{overload}},
		{name: "deadline bail-out", policy: RetryConfig{Jitter: constJitter(1)}, clock: &fakeclock.Clock{T: time.Now().Add(time.Hour - 50*time.Millisecond)}, ctx: deadlineSoon, errs: repeat(overload, 5)},
		{name: "context cancelled during the call", ctx: func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, errs: []error{conflict}},
	}
	tr := &countingTracer{}
	attempts, calls := 0, 0
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			pol := p.policy.withDefaults()
			clk := p.clock
			if clk == nil {
				clk = &fakeclock.Clock{T: t0}
			}
			l := &retryLoop{policy: &pol, clock: clk, maxRetries: pol.MaxRetries, budget: p.budget, tracer: tr}
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if p.ctx != nil {
				ctx, cancel = p.ctx()
			}
			defer cancel()
			n := 0
			_ = l.run(ctx, scripted(&n, p.errs...))
			attempts += n
			calls++
		})
	}
	if tr.starts != tr.ends || tr.starts != attempts {
		t.Errorf("attempt starts %d, ends %d, attempts %d: every start needs exactly one end", tr.starts, tr.ends, attempts)
	}
	if tr.calls != tr.callEnds || tr.calls != calls {
		t.Errorf("call starts %d, ends %d, calls %d", tr.calls, tr.callEnds, calls)
	}
	if tr.retries != attempts-calls {
		t.Errorf("retries %d, want attempts - calls = %d", tr.retries, attempts-calls)
	}
	if tr.refs != 1 {
		t.Errorf("budget refusals %d, want 1", tr.refs)
	}
}

// BenchmarkRetryLoop shows that the tracer hook costs nothing when unset: the
// loop does not allocate without a tracer.
func BenchmarkRetryLoop(b *testing.B) {
	p := RetryConfig{}.withDefaults()
	ok := func(context.Context) (Class, error) { return classNone, nil }
	b.Run("no tracer", func(b *testing.B) {
		l := &retryLoop{policy: &p, clock: realClock{}, maxRetries: p.MaxRetries}
		b.ReportAllocs()
		for b.Loop() {
			_ = l.run(context.Background(), ok)
		}
	})
	b.Run("counting tracer", func(b *testing.B) {
		l := &retryLoop{policy: &p, clock: realClock{}, maxRetries: p.MaxRetries, tracer: &countingTracer{}}
		b.ReportAllocs()
		for b.Loop() {
			_ = l.run(context.Background(), ok)
		}
	})
}

func TestRetryLoopDoesNotAllocateWithoutTracer(t *testing.T) {
	p := RetryConfig{}.withDefaults()
	l := &retryLoop{policy: &p, clock: realClock{}, maxRetries: p.MaxRetries, budget: newRetryBudget(RetryConfig{}, time.Now())}
	ok := func(context.Context) (Class, error) { return classNone, nil }
	if n := testing.AllocsPerRun(100, func() { _ = l.run(context.Background(), ok) }); n != 0 {
		t.Errorf("the loop allocates %v times per call without a tracer", n)
	}
}
