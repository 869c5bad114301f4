package pgtxprom

import (
	"context"
	"strings"
	"testing"

	"github.com/pgtx-go/pgtx/failover"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestTracerFailover: the lost commits are counted by label and answer,
// and the replication gauge follows the notices: absent until the first,
// then 1 or 0; the metrics pass promlint.
func TestTracerFailover(t *testing.T) {
	tr := NewTracer(WithPoolName("main"))
	ctx := context.Background()
	if n := testutil.CollectAndCount(tr, "pgtx_replication_asynchronous"); n != 0 {
		t.Errorf("pgtx_replication_asynchronous has %d series before any notice, want none", n)
	}
	tr.TraceReplication(ctx, failover.ReplicationData{Asynchronous: true, Standbys: 1})
	for _, s := range []string{"aborted", "not yet assigned", "not yet assigned"} {
		tr.TraceCommitLost(ctx, failover.CommitLostData{Label: "transfer", Status: s})
	}
	const want = `
# HELP pgtx_commits_lost_total Commits Transaction calls reported that a later run of the server (a failover, a restart) provably does not have, by that run's answer.
# TYPE pgtx_commits_lost_total counter
pgtx_commits_lost_total{label="transfer",pool="main",status="aborted"} 1
pgtx_commits_lost_total{label="transfer",pool="main",status="not yet assigned"} 2
# HELP pgtx_replication_asynchronous 1 while the pool's server acknowledges commits that no standby has (standbys stream, none synchronous), 0 once it no longer does.
# TYPE pgtx_replication_asynchronous gauge
pgtx_replication_asynchronous{pool="main"} 1
`
	if err := testutil.CollectAndCompare(tr, strings.NewReader(want), "pgtx_commits_lost_total", "pgtx_replication_asynchronous"); err != nil {
		t.Error(err)
	}
	tr.TraceReplication(ctx, failover.ReplicationData{Standbys: 0})
	if v := testutil.ToFloat64(tr.asynchronous); v != 0 {
		t.Errorf("pgtx_replication_asynchronous = %v after the server stopped, want 0", v)
	}
	problems, err := testutil.CollectAndLint(tr)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
