package acquire

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Tracer is installed as a pgxpool's connection tracer to count the
// waiters of a [Queue]: pgxpool calls its acquire events on every path,
// not only [Queue.Acquire]. Its owner takes it off every connection again
// (in BeforeConnect), so queries pay nothing for it; the caller's own
// tracer, if any, keeps receiving everything.
type Tracer struct {
	q           *Queue
	user        pgx.QueryTracer
	userAcquire pgxpool.AcquireTracer
	userRelease pgxpool.ReleaseTracer
	// Acquired and Released, when set, are told of every connection
	// acquired, and of every release, before the connection is back in
	// the pool.
	Acquired, Released func()
}

// NewTracer returns the tracer counting q's waiters and forwarding the
// pool's acquire and release events to user, which may be nil.
func NewTracer(q *Queue, user pgx.QueryTracer) *Tracer {
	t := &Tracer{q: q, user: user}
	t.userAcquire, _ = user.(pgxpool.AcquireTracer)
	t.userRelease, _ = user.(pgxpool.ReleaseTracer)
	return t
}

// TraceQueryStart and TraceQueryEnd only make Tracer a pgx.QueryTracer,
// which ConnConfig.Tracer must be; connections never call them, as each is
// given the caller's tracer back.
func (t *Tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd does nothing: see [Tracer.TraceQueryStart].
func (t *Tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceAcquireStart counts a waiter, and hands the acquire's context to the
// caller's tracer, marked shared as that tracer may keep it.
func (t *Tracer) TraceAcquireStart(ctx context.Context, p *pgxpool.Pool, d pgxpool.TraceAcquireStartData) context.Context {
	t.q.waiters.Add(1)
	if t.userAcquire != nil {
		MarkShared(ctx)
		ctx = t.userAcquire.TraceAcquireStart(ctx, p, d)
	}
	return ctx
}

// TraceAcquireEnd counts the waiter out, tells Acquired of a connection
// acquired, and tells the caller's tracer.
func (t *Tracer) TraceAcquireEnd(ctx context.Context, p *pgxpool.Pool, d pgxpool.TraceAcquireEndData) {
	t.q.waiters.Add(-1)
	if d.Err == nil && t.Acquired != nil {
		t.Acquired()
	}
	if t.userAcquire != nil {
		t.userAcquire.TraceAcquireEnd(ctx, p, d)
	}
}

// TraceRelease tells Released and the caller's tracer.
func (t *Tracer) TraceRelease(p *pgxpool.Pool, d pgxpool.TraceReleaseData) {
	if t.Released != nil {
		t.Released()
	}
	if t.userRelease != nil {
		t.userRelease.TraceRelease(p, d)
	}
}
