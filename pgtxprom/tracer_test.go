package pgtxprom

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// scriptedTransactions sends t the events pgtx sends for five calls of the
// label "transfer": a conflict retried once, an overload retried once, a
// call cancelled by its deadline, an ambiguous COMMIT, and a lost
// connection whose retry the budget refused.
func scriptedTransactions(t pgtx.TransactionTracer) {
	ctx := context.Background()
	const label = "transfer"
	call := func(d time.Duration, err error, class pgtx.Class, attempts ...pgtx.TraceAttemptEndData) {
		cctx := t.TraceTransactionStart(ctx, pgtx.TraceTransactionStartData{Label: label, Isolation: pgtx.Serializable})
		for i, a := range attempts {
			a.Label, a.Isolation, a.Attempt = label, pgtx.Serializable, i+1
			actx := t.TraceAttemptStart(cctx, pgtx.TraceAttemptStartData{Label: label, Isolation: pgtx.Serializable, Attempt: i + 1})
			t.TraceAttemptEnd(actx, a)
		}
		t.TraceTransactionEnd(cctx, pgtx.TraceTransactionEndData{Label: label, Isolation: pgtx.Serializable,
			Attempts: len(attempts), Err: err, Class: class, Duration: d})
	}
	conflict := fmt.Errorf("ERROR: could not serialize access (SQLSTATE 40001)")
	overload := fmt.Errorf("FATAL: sorry, too many clients already (SQLSTATE 53300)")
	call(8*time.Millisecond, nil, pgtx.Class(0),
		pgtx.TraceAttemptEndData{Err: conflict, Class: pgtx.ClassConflict, Retry: true, Backoff: 3 * time.Millisecond},
		pgtx.TraceAttemptEndData{})
	call(300*time.Millisecond, nil, pgtx.Class(0),
		pgtx.TraceAttemptEndData{Err: overload, Class: pgtx.ClassOverload, Retry: true, Backoff: 250 * time.Millisecond},
		pgtx.TraceAttemptEndData{})
	call(50*time.Millisecond, context.DeadlineExceeded, pgtx.ClassTimeout,
		pgtx.TraceAttemptEndData{Err: context.DeadlineExceeded, Class: pgtx.ClassTimeout})
	call(2*time.Second, pgtx.ErrCommitUnknown, pgtx.ClassAmbiguous,
		pgtx.TraceAttemptEndData{Err: pgtx.ErrCommitUnknown, Class: pgtx.ClassAmbiguous})
	refused := fmt.Errorf("pgtx: gave up after 1 attempt: %w", pgtx.ErrRetryBudgetExhausted)
	call(4*time.Millisecond, refused, pgtx.ClassConnectionLost,
		pgtx.TraceAttemptEndData{Err: refused, Class: pgtx.ClassConnectionLost})
}

// TestTracerScripted checks the exact names, labels and values the Tracer
// exports for the scripted calls.
func TestTracerScripted(t *testing.T) {
	tr := NewTracer(WithPoolName("main"))
	scriptedTransactions(tr)
	want := `
# HELP pgtx_transactions_total Transaction calls ended, by outcome: committed, or the class of the error returned.
# TYPE pgtx_transactions_total counter
pgtx_transactions_total{label="transfer",outcome="ambiguous",pool="main"} 1
pgtx_transactions_total{label="transfer",outcome="committed",pool="main"} 2
pgtx_transactions_total{label="transfer",outcome="connection_lost",pool="main"} 1
pgtx_transactions_total{label="transfer",outcome="timeout",pool="main"} 1
# HELP pgtx_transaction_attempts Attempts per Transaction call.
# TYPE pgtx_transaction_attempts histogram
pgtx_transaction_attempts_bucket{label="transfer",pool="main",le="1"} 3
pgtx_transaction_attempts_bucket{label="transfer",pool="main",le="2"} 5
pgtx_transaction_attempts_bucket{label="transfer",pool="main",le="3"} 5
pgtx_transaction_attempts_bucket{label="transfer",pool="main",le="4"} 5
pgtx_transaction_attempts_bucket{label="transfer",pool="main",le="6"} 5
pgtx_transaction_attempts_bucket{label="transfer",pool="main",le="8"} 5
pgtx_transaction_attempts_bucket{label="transfer",pool="main",le="11"} 5
pgtx_transaction_attempts_bucket{label="transfer",pool="main",le="+Inf"} 5
pgtx_transaction_attempts_sum{label="transfer",pool="main"} 7
pgtx_transaction_attempts_count{label="transfer",pool="main"} 5
# HELP pgtx_retries_total Transaction attempts run again, by the class of the error that ended the attempt before.
# TYPE pgtx_retries_total counter
pgtx_retries_total{class="conflict",label="transfer",pool="main"} 1
pgtx_retries_total{class="overload",label="transfer",pool="main"} 1
# HELP pgtx_retry_backoff_seconds_total Time the retries waited before they ran, by the class of the error retried.
# TYPE pgtx_retry_backoff_seconds_total counter
pgtx_retry_backoff_seconds_total{class="conflict",label="transfer",pool="main"} 0.003
pgtx_retry_backoff_seconds_total{class="overload",label="transfer",pool="main"} 0.25
# HELP pgtx_retry_budget_refusals_total Retries the pool's retry budget refused.
# TYPE pgtx_retry_budget_refusals_total counter
pgtx_retry_budget_refusals_total{label="transfer",pool="main"} 1
`
	if err := testutil.CollectAndCompare(tr, strings.NewReader(want),
		"pgtx_transactions_total", "pgtx_transaction_attempts", "pgtx_retries_total",
		"pgtx_retry_backoff_seconds_total", "pgtx_retry_budget_refusals_total"); err != nil {
		t.Error(err)
	}
	// The durations, in seconds, by outcome.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(tr)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	type sample struct {
		count uint64
		sum   float64
	}
	got := map[string]sample{}
	for _, f := range families {
		if f.GetName() != "pgtx_transaction_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					got[l.GetValue()] = sample{m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()}
				}
			}
		}
	}
	wantDurations := map[string]sample{"committed": {2, 0.308}, "timeout": {1, 0.05}, "ambiguous": {1, 2}, "connection_lost": {1, 0.004}}
	if len(got) != len(wantDurations) {
		t.Errorf("duration series by outcome %v, want %v", got, wantDurations)
	}
	for outcome, w := range wantDurations {
		if g := got[outcome]; g.count != w.count || math.Abs(g.sum-w.sum) > 1e-9 {
			t.Errorf("duration of %s calls: %d observations summing to %gs, want %d and %gs", outcome, g.count, g.sum, w.count, w.sum)
		}
	}
}

// TestTracerLint: the Tracer's metrics pass promlint, with a namespace of
// their own too.
func TestTracerLint(t *testing.T) {
	for _, opts := range [][]TracerOption{nil, {WithNamespace("app")}} {
		tr := NewTracer(append([]TracerOption{WithPoolName("main")}, opts...)...)
		scriptedTransactions(tr)
		problems, err := testutil.CollectAndLint(tr)
		if err != nil {
			t.Fatalf("CollectAndLint: %v", err)
		}
		for _, p := range problems {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}
