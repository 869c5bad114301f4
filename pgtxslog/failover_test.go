package pgtxslog_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/failover"
)

// TestTraceCommitLost: a lost commit is one Error line with the call's
// label (absent when empty), the id, when it committed, the timelines and
// the answer.
func TestTraceCommitLost(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 19, 54, 17, 0, time.UTC)
	h, tr := newRecorder(slog.LevelDebug, nil)
	tr.TraceCommitLost(context.Background(), failover.CommitLostData{Label: "transfer", Xid: 1<<32 | 734,
		CommittedAt: at, Timeline: 1, NewTimeline: 2, Status: "not yet assigned"})
	tr.TraceCommitLost(context.Background(), failover.CommitLostData{Xid: 735, CommittedAt: at, Timeline: 3, NewTimeline: 4, Status: "aborted"})
	assertLines(t, h,
		line{slog.LevelError, "commit lost", map[string]string{"label": "transfer", "xid": "4294968030",
			"committed_at": at.String(), "timeline": "1", "new_timeline": "2", "status": "not yet assigned"}},
		line{slog.LevelError, "commit lost", map[string]string{"xid": "735", "committed_at": at.String(), "timeline": "3",
			"new_timeline": "4", "status": "aborted"}})
}

// TestTraceReplication: a server that acknowledges commits no standby has
// is a Warn line; its end an Info line; both with the standbys, the
// settings and the timeline.
func TestTraceReplication(t *testing.T) {
	t.Parallel()
	h, tr := newRecorder(slog.LevelDebug, nil)
	tr.TraceReplication(context.Background(), failover.ReplicationData{Asynchronous: true, Standbys: 2, SynchronousCommit: "on", Timeline: 1})
	tr.TraceReplication(context.Background(), failover.ReplicationData{Standbys: 2, SynchronousStandbyNames: "ANY 1 (a, b)",
		SynchronousCommit: "on", Timeline: 1})
	assertLines(t, h,
		line{slog.LevelWarn, "replication changed", map[string]string{"asynchronous": "true", "standbys": "2",
			"synchronous_standby_names": "", "synchronous_commit": "on", "timeline": "1"}},
		line{slog.LevelInfo, "replication changed", map[string]string{"asynchronous": "false", "standbys": "2",
			"synchronous_standby_names": "ANY 1 (a, b)", "synchronous_commit": "on", "timeline": "1"}})
}
