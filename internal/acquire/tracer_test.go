package acquire

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// queryTracer is a caller's tracer of queries only.
type queryTracer struct{ events *[]string }

func (r queryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	*r.events = append(*r.events, "query start")
	return ctx
}

func (r queryTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {
	*r.events = append(*r.events, "query end")
}

// userKey is the key of the value a caller's acquire tracer adds to the
// context it returns.
type userKey struct{}

// poolTracer is a caller's tracer of queries and of the pool's acquires
// and releases.
type poolTracer struct{ queryTracer }

func (r poolTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	*r.events = append(*r.events, "acquire start")
	return context.WithValue(ctx, userKey{}, "user")
}

func (r poolTracer) TraceAcquireEnd(context.Context, *pgxpool.Pool, pgxpool.TraceAcquireEndData) {
	*r.events = append(*r.events, "acquire end")
}

func (r poolTracer) TraceRelease(*pgxpool.Pool, pgxpool.TraceReleaseData) {
	*r.events = append(*r.events, "release")
}

// TestTracer: the tracer counts each acquire in progress, whatever the
// caller's tracer; it forwards the pool's events to a caller's tracer that
// takes them, marking the acquire context shared as that tracer may keep
// it, and never forwards query events (connections are given the caller's
// tracer itself).
func TestTracer(t *testing.T) {
	tests := []struct {
		name       string
		user       func(events *[]string) pgx.QueryTracer
		wantEvents []string
		wantShared bool
	}{
		{name: "no tracer of the caller's", user: func(*[]string) pgx.QueryTracer { return nil }},
		{name: "a tracer of queries only", user: func(e *[]string) pgx.QueryTracer { return queryTracer{e} }},
		{
			name:       "a tracer of acquires and releases",
			user:       func(e *[]string) pgx.QueryTracer { return poolTracer{queryTracer{e}} },
			wantEvents: []string{"acquire start", "acquire start", "acquire end", "acquire end", "release"},
			wantShared: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var q Queue
				var events []string
				tr := NewTracer(&q, tt.user(&events))
				var ap acquireCtxPool
				actx := ap.get(context.Background(), time.Second)
				t.Cleanup(func() { ap.put(actx) })

				waiting := func(want int64) {
					t.Helper()
					if got := q.Counts().Waiting; got != want {
						t.Errorf("Waiting = %d, want %d", got, want)
					}
				}
				ctx := tr.TraceAcquireStart(actx, nil, pgxpool.TraceAcquireStartData{})
				waiting(1)
				tr.TraceAcquireStart(context.Background(), nil, pgxpool.TraceAcquireStartData{})
				waiting(2)
				tr.TraceAcquireEnd(ctx, nil, pgxpool.TraceAcquireEndData{})
				waiting(1)
				tr.TraceAcquireEnd(context.Background(), nil, pgxpool.TraceAcquireEndData{})
				waiting(0)
				tr.TraceRelease(nil, pgxpool.TraceReleaseData{})
				if qctx := tr.TraceQueryStart(actx, nil, pgx.TraceQueryStartData{}); qctx != actx {
					t.Error("TraceQueryStart changed the context")
				}
				tr.TraceQueryEnd(actx, nil, pgx.TraceQueryEndData{})

				if !slices.Equal(events, tt.wantEvents) {
					t.Errorf("the caller's tracer saw %q, want %q", events, tt.wantEvents)
				}
				if got := actx.shared.Load(); got != tt.wantShared {
					t.Errorf("acquire context shared = %v, want %v", got, tt.wantShared)
				}
				if tt.wantShared && ctx.Value(userKey{}) != "user" {
					t.Error("TraceAcquireStart dropped the context the caller's tracer returned")
				}
				if !tt.wantShared && ctx != context.Context(actx) {
					t.Error("TraceAcquireStart changed the context with no tracer of the caller's to call")
				}
			})
		})
	}
}
