package pgtxotel

import (
	"context"
	"testing"

	"github.com/pgtx-go/pgtx/failover"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestTraceCommitLost: each lost commit is counted by its call's label and
// the server's answer; a commit without a label has none.
func TestTraceCommitLost(t *testing.T) {
	h := newHarness(t, WithAttributes(attribute.String("service", "bank")))
	ctx := context.Background()
	h.tr.TraceCommitLost(ctx, failover.CommitLostData{Label: "transfer", Xid: 734, Timeline: 1, NewTimeline: 2, Status: "aborted"})
	h.tr.TraceCommitLost(ctx, failover.CommitLostData{Label: "transfer", Xid: 735, Timeline: 1, NewTimeline: 2, Status: "not yet assigned"})
	h.tr.TraceCommitLost(ctx, failover.CommitLostData{Label: "transfer", Xid: 736, Timeline: 1, NewTimeline: 2, Status: "not yet assigned"})
	h.tr.TraceCommitLost(ctx, failover.CommitLostData{Xid: 737, Timeline: 1, NewTimeline: 2, Status: "in progress"})
	rm := collect(t, h.reader)
	checkUnits(t, rm)
	assertSeries(t, "pgtx.commit_lost.count", sumSeries(t, rm, "pgtx.commit_lost.count"), map[string]int64{
		"pgtx.commit_lost.status=aborted,pgtx.label=transfer,service=bank":          1,
		"pgtx.commit_lost.status=not yet assigned,pgtx.label=transfer,service=bank": 2,
		"pgtx.commit_lost.status=in progress,service=bank":                          1,
	})
}

// TestTraceReplication: the gauge is 1 while the server acknowledges
// commits no standby has, 0 once it no longer does.
func TestTraceReplication(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	gauge := func() map[string]int64 {
		g := mustFindMetric(t, collect(t, h.reader), "pgtx.replication.asynchronous").Data.(metricdata.Gauge[int64])
		got := map[string]int64{}
		for _, dp := range g.DataPoints {
			got[setKey(dp.Attributes)] = dp.Value
		}
		return got
	}
	h.tr.TraceReplication(ctx, failover.ReplicationData{Asynchronous: true, Standbys: 1})
	assertSeries(t, "pgtx.replication.asynchronous", gauge(), map[string]int64{"": 1})
	h.tr.TraceReplication(ctx, failover.ReplicationData{Standbys: 1, SynchronousStandbyNames: "*"})
	assertSeries(t, "pgtx.replication.asynchronous", gauge(), map[string]int64{"": 0})
}
