package integration

// TestCollectorWithServer moved here from pgtxprom (collector_test.go): it
// needs a server, which would make the pgtxprom module require the test
// harness (pgtxtest) and so put testcontainers in the module graph of
// every pgtxprom user.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxprom"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestCollectorWithServer runs transactions on a real server and reads their
// traces in the gathered metrics: calls, waits, holds, a waiter queued behind
// a held connection, and a cancelled statement.
func TestCollectorWithServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := pgtx.ParseConfig(pgtxtest.NewDatabase(t))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	cfg.MaxConns = 1 // a second caller has to wait
	cfg.AcquireTimeout = 30 * time.Second
	pool, err := pgtx.NewWithConfig(ctx, cfg) // CancelModePool: a cancel pool
	if err != nil {
		t.Fatalf("NewWithConfig: %v", err)
	}
	t.Cleanup(pool.Close)
	reg := prometheus.NewPedanticRegistry()
	collector, err := pgtxprom.NewCollector(pool, "main")
	if err != nil {
		t.Fatalf("NewCollector: %v", err)
	}
	reg.MustRegister(collector)

	noop := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "select 1")
		return err
	}
	const calls = 3
	for range calls {
		if err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, noop); err != nil {
			t.Fatalf("Transaction: %v", err)
		}
	}
	for _, tt := range []struct {
		metric string
		labels []string
		want   float64
	}{
		{"pgtx_transactions_started_total", nil, calls},
		{"pgtx_pool_acquire_wait_seconds", nil, calls}, // sample count
		{"pgtx_connection_holds_total", nil, calls},
		{"pgtx_pool_acquires_total", nil, calls},
		{"pgtx_pool_new_connections_total", nil, 1},
		{"pgtx_pool_connections", []string{"state", "idle"}, 1},
		{"pgtx_pool_connections", []string{"state", "acquired"}, 0},
		{"pgtx_pool_max_connections", nil, 1},
		{"pgtx_transactions_in_flight", nil, 0},
		{"pgtx_pool_waiters", nil, 0},
		{"pgtx_cancel_pool_max_connections", nil, cancelPoolSize},
	} {
		if got := promValue(t, reg, tt.metric, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %g, want %g", tt.metric, tt.labels, got, tt.want)
		}
	}
	if got := promValue(t, reg, "pgtx_connection_hold_seconds_total"); got <= 0 {
		t.Errorf("pgtx_connection_hold_seconds_total = %g, want > 0", got)
	}

	t.Run("waiter", func(t *testing.T) {
		held, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		releaseHolder := func() { once.Do(func() { close(release) }) }
		defer releaseHolder() // also when the test fails: Close waits for the connection
		errs := make(chan error, 2)
		go func() {
			errs <- pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				close(held)
				<-release
				return noop(ctx, tx)
			})
		}()
		<-held
		go func() { errs <- pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, noop) }()
		promEventually(t, reg, "pgtx_pool_waiters", 1)
		if got := promValue(t, reg, "pgtx_transactions_in_flight"); got != 1 {
			t.Errorf("pgtx_transactions_in_flight = %g, want 1", got)
		}
		if got := promValue(t, reg, "pgtx_transaction_oldest_in_flight_seconds"); got <= 0 {
			t.Errorf("pgtx_transaction_oldest_in_flight_seconds = %g, want > 0", got)
		}
		releaseHolder()
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("Transaction: %v", err)
			}
		}
		promEventually(t, reg, "pgtx_pool_waiters", 0)
		if got := promValue(t, reg, "pgtx_transactions_started_total"); got != calls+2 {
			t.Errorf("pgtx_transactions_started_total = %g, want %d", got, calls+2)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		sctx, scancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer scancel()
		err := pgtx.Transaction(sctx, pool, pgtx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "select pg_sleep(10)")
			return err
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Transaction = %v, want the context's deadline", err)
		}
		promEventually(t, reg, "pgtx_cancel_latency_seconds", 1) // sample count
		if got := promValue(t, reg, "pgtx_cancels_total", "outcome", "signalled"); got != 1 {
			t.Errorf(`pgtx_cancels_total{outcome="signalled"} = %g, want 1`, got)
		}
		if got := promValue(t, reg, "pgtx_cancel_pool_connections", "state", "idle") +
			promValue(t, reg, "pgtx_cancel_pool_connections", "state", "acquired"); got < 1 {
			t.Errorf("pgtx_cancel_pool_connections = %g, want at least 1", got)
		}
	})
}

// promValue gathers reg and returns the value of the series of metric whose
// labels include the given name/value pairs: a counter's or gauge's value, a
// histogram's or summary's sample count. It fails the test when there is no
// such series.
func promValue(t *testing.T, reg prometheus.Gatherer, metric string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !promHasLabels(m, labels) {
				continue
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount())
			case dto.MetricType_SUMMARY:
				return float64(m.GetSummary().GetSampleCount())
			}
		}
	}
	t.Fatalf("no series %s%v", metric, labels)
	return 0
}

// promHasLabels reports whether m has the label name/value pairs of kv.
func promHasLabels(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == kv[i] && lp.GetValue() == kv[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// promEventually waits up to ten seconds for metric (unlabelled beyond pool) to
// reach want.
func promEventually(t *testing.T, reg prometheus.Gatherer, metric string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := promValue(t, reg, metric)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %g after 10s, want %g", metric, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
