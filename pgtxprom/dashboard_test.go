package pgtxprom

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/failover"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// dashboardFile is the Grafana dashboard over this package's metrics.
const dashboardFile = "dashboard/pgtx.json"

// grafanaDashboard is what the test reads of the dashboard's JSON.
type grafanaDashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID          int    `json:"id"`
		Type        string `json:"type"`
		Title       string `json:"title"`
		Description string `json:"description"`
		Targets     []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// metricName finds the metric names in a PromQL expression.
var metricName = regexp.MustCompile(`\bpgtx_[a-z0-9_]+\b`)

// exportedNames returns the names of every series the package's collectors
// export, gathered from a Collector over a pool with a circuit breaker and
// the contention manager, and from a Tracer that has
// seen the scripted transactions, a change of state, a lost commit and a
// notice of asynchronous replication: each histogram as
// its _bucket, _sum and _count series too.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	pool := newOfflinePoolWith(t, func(cfg *pgtx.Config) {
		cfg.Retry.MaxRetries, cfg.Retry.MaxAdaptiveRetries, cfg.Retry.UnavailableTimeout = -1, -1, -1
		cfg.Breaker = &pgtx.BreakerConfig{ConsecutiveFailures: 1}
	})
	// One call that cannot connect, so the pool's counters and the
	// breaker have something to say.
	_ = pgtx.Transaction(context.Background(), pool, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
	tr := NewTracer(WithPoolName("main"))
	scriptedTransactions(tr)
	tr.TraceBreakerStateChange(context.Background(), pgtx.TraceBreakerStateChangeData{Name: "main", From: pgtx.BreakerClosed, To: pgtx.BreakerOpen})
	tr.TraceCommitLost(context.Background(), failover.CommitLostData{Label: "transfer", Status: "aborted"})
	tr.TraceReplication(context.Background(), failover.ReplicationData{Asynchronous: true, Standbys: 1})

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newCollector(t, pool, "main"), tr)
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f.GetName()+s] = true
			}
		}
	}
	return names
}

// TestDashboardQueries checks the dashboard against what the collectors
// really export: every metric a query or a variable names exists, so a
// renamed metric breaks this test rather than the dashboard; every panel
// says what it shows; and the signals the storm card and the README point
// to each have a panel.
func TestDashboardQueries(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s is not JSON: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("the dashboard has no title or uid")
	}
	exported := exportedNames(t)

	used := map[string]bool{}
	check := func(where, expr string) {
		if strings.Count(expr, "(") != strings.Count(expr, ")") || strings.Count(expr, "{") != strings.Count(expr, "}") {
			t.Errorf("%s: unbalanced query %q", where, expr)
		}
		names := metricName.FindAllString(expr, -1)
		if len(names) == 0 {
			t.Errorf("%s: query %q names no pgtx metric", where, expr)
		}
		for _, n := range names {
			used[n] = true
			if !exported[n] {
				t.Errorf("%s: query %q reads %s, which pgtxprom does not export", where, expr, n)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			check("variable "+v.Name, v.Definition)
		}
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Title == "" || p.Description == "" || len(p.Targets) == 0 {
			t.Errorf("panel %d (%q): a panel needs a title, a description and a query", p.ID, p.Title)
		}
		for _, tg := range p.Targets {
			check("panel "+p.Title, tg.Expr)
		}
	}
	for _, n := range []string{
		"pgtx_pool_waiters", "pgtx_pool_acquire_wait_seconds_bucket", "pgtx_pool_acquire_timeouts_total",
		"pgtx_transactions_started_total", "pgtx_connection_hold_seconds_total", "pgtx_connection_holds_total",
		"pgtx_retries_total", "pgtx_transaction_attempts_sum", "pgtx_transaction_attempts_count",
		"pgtx_cancels_total", "pgtx_commit_resolutions_total", "pgtx_transactions_total", "pgtx_breaker_state",
		"pgtx_contention_limit", "pgtx_retry_budget_refusals_total",
		"pgtx_failover_commit_checks_total", "pgtx_replication_asynchronous",
		"pgtx_pool_slot_refused_connects_total", "pgtx_pool_slot_limit",
	} {
		if !used[n] {
			t.Errorf("no panel reads %s", n)
		}
	}
}
