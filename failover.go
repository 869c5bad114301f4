package pgtx

import (
	"context"
	"time"

	"github.com/pgtx-go/pgtx/failover"
	"github.com/pgtx-go/pgtx/internal/acked"
	"github.com/pgtx-go/pgtx/internal/resolve"
	"github.com/pgtx-go/pgtx/internal/txn"
)

// The bounds of the commits a pool keeps to name those a failover lost.
const (
	defaultRecentCommits = 1024            // Config.RecentCommits
	recentCommitsAge     = 5 * time.Minute // the oldest asked about
	replicationRefresh   = time.Minute     // how often a writing pool asks how its server replicates
)

// newAcked returns nil when RecentCommits or ResolveTimeout is negative;
// its surveys ask resolver, the pool's.
func newAcked(cfg *Config, resolver *resolve.Resolver) *acked.Watcher {
	if cfg.ResolveTimeout < 0 || cfg.RecentCommits < 0 {
		return nil
	}
	tracer, _ := cfg.Tracer.(failover.Tracer)
	w := acked.New(acked.Settings{
		Size:     defaultOrNone(cfg.RecentCommits, defaultRecentCommits),
		MaxAge:   recentCommitsAge,
		Refresh:  replicationRefresh,
		Surveyor: resolver,
		Clock:    realClock{},
		Discarded: func(e acked.Entry, run resolve.Run, status string) {
			if tracer != nil {
				tracer.TraceCommitLost(context.Background(), failover.CommitLostData{Label: e.Label, Xid: e.ID.Xid,
					CommittedAt: e.At, Timeline: e.ID.Run.Timeline, NewTimeline: run.Timeline, Status: status})
			}
		},
		Replication: func(r resolve.Replication, run resolve.Run) {
			if tracer != nil {
				tracer.TraceReplication(context.Background(), failover.ReplicationData{Asynchronous: r.Asynchronous(),
					Standbys: r.Standbys, SynchronousStandbyNames: r.SynchronousStandbyNames,
					SynchronousCommit: r.SynchronousCommit, Timeline: run.Timeline})
			}
		},
	})
	return w
}

func (p *Pool) acknowledged(t *txn.Tx, label string) {
	if id, ok := t.Acknowledged(); ok {
		p.acked.Record(id, label, time.Now())
	}
}

func ackedStats(w *acked.Watcher, s *Stats) {
	c := w.Counts()
	s.LostCommitCount, s.UnprovenCommitCount, s.SurvivedCommitCount = c.Discarded, c.Unproven, c.Survived
}
