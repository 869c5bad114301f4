package pgtxslog

import (
	"context"
	"log/slog"

	"github.com/pgtx-go/pgtx/failover"
)

// TraceCommitLost logs, as [CommitLost], a commit a call reported that a
// later run of the server does not have: the call's label, the
// transaction's id, when it committed, the timelines and the server's
// answer.
func (t *Tracer) TraceCommitLost(ctx context.Context, data failover.CommitLostData) {
	logger, level := t.enabled(ctx, CommitLost)
	if logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 6)
	if data.Label != "" {
		attrs = append(attrs, slog.String("label", data.Label))
	}
	attrs = append(attrs,
		slog.Uint64("xid", data.Xid),
		slog.Time("committed_at", data.CommittedAt),
		slog.Int("timeline", int(data.Timeline)),
		slog.Int("new_timeline", int(data.NewTimeline)),
		slog.String("status", data.Status))
	write(ctx, logger, level, CommitLost, nil, attrs)
}

// TraceReplication logs how the server replicates: as [ReplicationAsync]
// when it acknowledges commits that no standby has, as
// [ReplicationChanged] when that stopped.
func (t *Tracer) TraceReplication(ctx context.Context, data failover.ReplicationData) {
	e := ReplicationChanged
	if data.Asynchronous {
		e = ReplicationAsync
	}
	logger, level := t.enabled(ctx, e)
	if logger == nil {
		return
	}
	write(ctx, logger, level, e, nil, []slog.Attr{
		slog.Bool("asynchronous", data.Asynchronous),
		slog.Int("standbys", data.Standbys),
		slog.String("synchronous_standby_names", data.SynchronousStandbyNames),
		slog.String("synchronous_commit", data.SynchronousCommit),
		slog.Int("timeline", int(data.Timeline)),
	})
}
