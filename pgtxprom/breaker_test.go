package pgtxprom

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const transitionsHeader = `
# HELP pgtx_breaker_transitions_total Changes of state of circuit breakers, by breaker name and the states left and entered.
# TYPE pgtx_breaker_transitions_total counter
`

func TestTracerBreaker(t *testing.T) {
	bt := NewTracer()
	ctx := context.Background()
	if got := testutil.CollectAndCount(bt); got != 0 {
		t.Errorf("CollectAndCount before any change = %d, want 0", got)
	}
	for _, d := range []pgtx.TraceBreakerStateChangeData{
		{Name: "replica", From: pgtx.BreakerClosed, To: pgtx.BreakerOpen, Reason: "5 consecutive failures"},
		{Name: "replica", From: pgtx.BreakerOpen, To: pgtx.BreakerHalfOpen, Reason: "open for 5s"},
		{Name: "replica", From: pgtx.BreakerHalfOpen, To: pgtx.BreakerOpen, Reason: "half-open probe failed"},
		{Name: "replica", From: pgtx.BreakerOpen, To: pgtx.BreakerHalfOpen, Reason: "open for 5s"},
		{Name: "replica", From: pgtx.BreakerHalfOpen, To: pgtx.BreakerClosed, Reason: "half-open probes succeeded"},
		{Name: "analytics", From: pgtx.BreakerClosed, To: pgtx.BreakerOpen, Reason: "failure ratio 6/10"},
		{From: pgtx.BreakerClosed, To: pgtx.BreakerOpen},
		{Name: "odd", From: pgtx.BreakerState(7), To: pgtx.BreakerOpen},
	} {
		bt.TraceBreakerStateChange(ctx, d)
	}
	want := transitionsHeader + `
pgtx_breaker_transitions_total{breaker="",from="closed",to="open"} 1
pgtx_breaker_transitions_total{breaker="analytics",from="closed",to="open"} 1
pgtx_breaker_transitions_total{breaker="odd",from="unknown",to="open"} 1
pgtx_breaker_transitions_total{breaker="replica",from="closed",to="open"} 1
pgtx_breaker_transitions_total{breaker="replica",from="half-open",to="closed"} 1
pgtx_breaker_transitions_total{breaker="replica",from="half-open",to="open"} 1
pgtx_breaker_transitions_total{breaker="replica",from="open",to="half-open"} 2
`
	if err := testutil.CollectAndCompare(bt, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(bt); err != nil || len(problems) > 0 {
		t.Errorf("CollectAndLint = %v, %v", problems, err)
	}
	gatherPedantic(t, bt)
}

func TestTracerBreakerNamespace(t *testing.T) {
	bt := NewTracer(nil, WithNamespace("app"))
	bt.TraceBreakerStateChange(context.Background(), pgtx.TraceBreakerStateChangeData{From: pgtx.BreakerClosed, To: pgtx.BreakerOpen})
	if got := testutil.CollectAndCount(bt, "app_breaker_transitions_total"); got != 1 {
		t.Errorf("CollectAndCount(app_breaker_transitions_total) = %d, want 1", got)
	}
}

// TestTracerBreakerOnPool sets a Tracer on a pool with a breaker: a call
// that cannot connect opens it, and time makes it half-open.
func TestTracerBreakerOnPool(t *testing.T) {
	bt := NewTracer()
	pool := newOfflinePoolWith(t, func(cfg *pgtx.Config) {
		cfg.Retry.MaxRetries, cfg.Retry.MaxAdaptiveRetries, cfg.Retry.UnavailableTimeout = -1, -1, -1
		cfg.Breaker = &pgtx.BreakerConfig{Name: "offline", ConsecutiveFailures: 1, OpenFor: time.Nanosecond}
		cfg.Tracer = bt
	})
	err := pgtx.Transaction(context.Background(), pool, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
	if err == nil || errors.Is(err, pgtx.ErrCircuitOpen) {
		t.Fatalf("Transaction = %v, want a connect error", err)
	}
	time.Sleep(time.Millisecond) // past OpenFor
	if got := pool.BreakerState(); got != pgtx.BreakerHalfOpen {
		t.Fatalf("BreakerState = %v, want half-open", got)
	}
	want := transitionsHeader + `
pgtx_breaker_transitions_total{breaker="offline",from="closed",to="open"} 1
pgtx_breaker_transitions_total{breaker="offline",from="open",to="half-open"} 1
`
	if err := testutil.CollectAndCompare(bt, strings.NewReader(want), "pgtx_breaker_transitions_total"); err != nil {
		t.Error(err)
	}
}
