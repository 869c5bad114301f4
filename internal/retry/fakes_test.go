package retry

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/contention"
)

// failure is an attempt's error of class c; two of the same class are
// equal, so errors.Is finds them.
type failure struct{ c classify.Class }

func (f failure) Error() string { return fmt.Sprintf("failure of class %d", f.c) }

// The errors of the scripts: one per class the loop treats apart, and an
// overload from a connect to two hosts, one of which refused.
var (
	conflict       = failure{classify.Conflict}
	overload       = failure{classify.Overload}
	unavailable    = failure{classify.Unavailable}
	lost           = failure{classify.ConnectionLost}
	ambiguous      = failure{classify.Ambiguous}
	timeout        = failure{classify.Timeout}
	permanent      = failure{classify.Permanent}
	refusedAndBusy = errors.Join(fmt.Errorf("dial: %w", syscall.ECONNREFUSED), overload)
)

// classOf is the class of a script's error: its failure's, none for nil.
func classOf(err error) classify.Class {
	var f failure
	if errors.As(err, &f) {
		return f.c
	}
	return classify.None
}

// scripted returns an attempt that fails with errs in order, then
// succeeds, and counts its calls.
func scripted(calls *int, errs ...error) func(context.Context) (classify.Class, error) {
	return func(context.Context) (classify.Class, error) {
		i := *calls
		*calls++
		if i < len(errs) {
			return classOf(errs[i]), errs[i]
		}
		return classify.None, nil
	}
}

func repeat(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

func jitter(j float64) func() float64 { return func() float64 { return j } }

// stopped is the error GaveUp makes in these tests: what the loop said,
// around the last attempt's error.
type stopped struct {
	err      error
	attempts int
	why      Why
}

func (e *stopped) Error() string {
	return fmt.Sprintf("gave up after %d (%+v): %v", e.attempts, e.why, e.err)
}

func (e *stopped) Unwrap() error { return e.err }

func gaveUp(err error, attempts int, why Why) error { return &stopped{err, attempts, why} }

// testPolicy is pgtx's default policy, with a jitter of 1.
var testPolicy = Policy{MaxAdaptiveRetries: 2, UnavailableTimeout: 15 * time.Second, Jitter: jitter(1),
	BaseBackoff: 100 * time.Millisecond, MaxBackoff: 10 * time.Second,
	ConflictBaseBackoff: 5 * time.Millisecond, ConflictMaxBackoff: 500 * time.Millisecond}

// newLoop returns a loop with testPolicy, pgtx's default MaxRetries (10),
// on clk.
func newLoop(clk Clock) *Loop {
	p := testPolicy
	p.MaxRetries = 10
	return &Loop{Policy: p, Clock: clk, GaveUp: gaveUp}
}

// event is one of a tracer's events, as recorder records it.
type event struct {
	name string
	n    int        // CallStart: 0; AttemptStart: the attempt
	end  AttemptEnd // AttemptEnd
	call CallEnd    // CallEnd
	ctx  any        // the value of ctxKey in the event's context
}

type ctxKey struct{}

// recorder records the events of a call, and tags the contexts it returns
// with the event that made them, so that a test sees which context each
// event and each attempt gets.
type recorder struct{ events []event }

func (r *recorder) CallStart(ctx context.Context) context.Context {
	r.events = append(r.events, event{name: "CallStart", ctx: ctx.Value(ctxKey{})})
	return context.WithValue(ctx, ctxKey{}, "call")
}

func (r *recorder) AttemptStart(ctx context.Context, n int) context.Context {
	r.events = append(r.events, event{name: "AttemptStart", n: n, ctx: ctx.Value(ctxKey{})})
	return context.WithValue(ctx, ctxKey{}, n)
}

func (r *recorder) AttemptEnd(ctx context.Context, e AttemptEnd) {
	r.events = append(r.events, event{name: "AttemptEnd", end: e, ctx: ctx.Value(ctxKey{})})
}

func (r *recorder) CallEnd(ctx context.Context, e CallEnd) {
	r.events = append(r.events, event{name: "CallEnd", call: e, ctx: ctx.Value(ctxKey{})})
}

// limitingGate returns a manager on clk and its gate of the empty label,
// limiting to one attempt at once, driven there as a pool's would be: by
// attempts that all conflicted. Its one attempt under the limit took mean,
// the label's mean attempt time from then on.
func limitingGate(t *testing.T, clk contention.Clock, mean time.Duration) (*contention.Manager, *contention.Gate) {
	t.Helper()
	m := contention.New(contention.Settings{Clock: clk, Threshold: 0.1, MaxLimit: 4})
	g := m.Gate("")
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
