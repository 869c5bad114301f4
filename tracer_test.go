package pgtx

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/pgtx-go/pgtx/internal/fakeclock"
)

type ctxKey struct{}

// recordingTracer records every event; it tags the attempt context so the
// test can check that the attempt and the end event get it.
type recordingTracer struct {
	starts []TraceAttemptStartData
	ends   []TraceAttemptEndData
	tagged int
}

func (r *recordingTracer) TraceTransactionStart(ctx context.Context, _ TraceTransactionStartData) context.Context {
	return ctx
}

func (r *recordingTracer) TraceTransactionEnd(context.Context, TraceTransactionEndData) {}

func (r *recordingTracer) TraceAttemptStart(ctx context.Context, d TraceAttemptStartData) context.Context {
	r.starts = append(r.starts, d)
	return context.WithValue(ctx, ctxKey{}, d.Attempt)
}

func (r *recordingTracer) TraceAttemptEnd(ctx context.Context, d TraceAttemptEndData) {
	if ctx.Value(ctxKey{}) == d.Attempt {
		r.tagged++
	}
	r.ends = append(r.ends, d)
}

func TestTracerOneEndPerStart(t *testing.T) {
	tr := &recordingTracer{}
	p := RetryConfig{Jitter: constJitter(1)}.withDefaults()
	clk := &fakeclock.Clock{T: time.Unix(1000, 0)}
	l := &retryLoop{policy: &p, clock: clk, maxRetries: p.MaxRetries, tracer: tr, label: "transfer", isolation: Serializable}
	errs := []error{pgErr(pgerrcode.SerializationFailure), pgErr(pgerrcode.TooManyConnections), pgErr(pgerrcode.DeadlockDetected)}
	calls := 0
	sawCtx := 0
	err := l.run(context.Background(), func(ctx context.Context) (Class, error) {
		if ctx.Value(ctxKey{}) == calls+1 {
			sawCtx++
		}
		return scripted(&calls, errs...)(ctx)
	})
	if sqlState(err) != pgerrcode.DeadlockDetected {
		t.Fatalf("err = %v", err)
	}
	if len(tr.starts) != 3 || len(tr.ends) != 3 || tr.tagged != 3 || sawCtx != 3 {
		t.Fatalf("starts %d, ends %d, tagged ends %d, attempts with the traced ctx %d; want 3 each", len(tr.starts), len(tr.ends), tr.tagged, sawCtx)
	}
	want := []struct {
		class   Class
		retry   bool
		backoff time.Duration
	}{
		{ClassConflict, true, 10 * time.Millisecond},
		{ClassOverload, true, 400 * time.Millisecond},
		{ClassConflict, false, 0}, // overload seen: the cap of 2 retries is reached
	}
	for i, w := range want {
		e := tr.ends[i]
		if e.Attempt != i+1 || tr.starts[i].Attempt != i+1 || e.Label != "transfer" || e.Isolation != Serializable {
			t.Errorf("end %d: %+v", i, e)
		}
		if e.Class != w.class || e.Retry != w.retry || e.Backoff != w.backoff || e.Err == nil {
			t.Errorf("end %d: class %v retry %v backoff %v; want %v %v %v", i, e.Class, e.Retry, e.Backoff, w.class, w.retry, w.backoff)
		}
	}
}

func TestTracerSuccess(t *testing.T) {
	tr := &recordingTracer{}
	p := RetryConfig{}.withDefaults()
	l := &retryLoop{policy: &p, clock: &fakeclock.Clock{}, maxRetries: p.MaxRetries, tracer: tr}
	calls := 0
	if err := l.run(context.Background(), scripted(&calls)); err != nil {
		t.Fatal(err)
	}
	if len(tr.ends) != 1 || tr.ends[0].Err != nil || tr.ends[0].Class != classNone || tr.ends[0].Retry {
		t.Errorf("ends = %+v", tr.ends)
	}
}
