package failover

import (
	"context"
	"time"
)

// Tracer is an optional interface of a pgtx Config.Tracer: it is told what
// a pool learns of the commits a failover can lose.
type Tracer interface {
	// TraceCommitLost is called once for each commit a Transaction call
	// reported (it returned nil) that a later run of the pool's server (a
	// standby promoted since, or the server after a restart) provably does
	// not have. It is called from a goroutine of the pool's, with
	// [context.Background], once the pool has met that run.
	TraceCommitLost(ctx context.Context, data CommitLostData)

	// TraceReplication is called when the pool's server acknowledges
	// commits that no standby has, once, and again whenever that changes;
	// it is asked at the pool's first writing commit, at a later run of the
	// server, and at most once a minute while the pool writes. It is called
	// from a goroutine of the pool's, with [context.Background].
	TraceReplication(ctx context.Context, data ReplicationData)
}

// CommitLostData describes a commit a Transaction call reported that a
// later run of the server does not have.
type CommitLostData struct {
	// Label is the call's Options.Label.
	Label string
	// Xid is the transaction's id, with its epoch (pg_current_xact_id).
	Xid uint64
	// CommittedAt is when the call learned of its commit, on the client's
	// clock.
	CommittedAt time.Time
	// Timeline is the timeline of the server that acknowledged the commit,
	// and NewTimeline the timeline of the server whose history lacks it.
	Timeline    int32
	NewTimeline int32
	// Status is that server's answer about the id: "aborted" (it has the
	// transaction without its commit, or the id was given again to a
	// transaction that aborted), "not yet assigned" (it never gave the id),
	// "in progress" (it gave the id again, to a transaction still running)
	// or "committed" (it gave the id again to a transaction that
	// committed: the id was given again after the transaction's run ended,
	// or the promoted standby's replay stopped short of the transaction's
	// WAL).
	Status string
}

// ReplicationData describes how the pool's server replicates its commits.
type ReplicationData struct {
	// Asynchronous reports that the server acknowledges commits that no
	// standby has: Standbys stream from it, and its commits wait for none of
	// them (SynchronousStandbyNames is empty, or SynchronousCommit is local
	// or off). A failover to one of them can then discard commits that calls
	// reported. False when that stopped being so.
	Asynchronous bool
	// Standbys counts the standbys streaming from the server (its
	// pg_stat_replication rows without a database: a logical replication's
	// are left out).
	Standbys int
	// SynchronousStandbyNames and SynchronousCommit are the server's
	// settings, as a session of the pool's role sees them.
	SynchronousStandbyNames string
	SynchronousCommit       string
	// Timeline is the server's timeline.
	Timeline int32
}
