package pgtx

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/failover"
	"github.com/pgtx-go/pgtx/internal/fakepg"
)

// TestRecentCommitsSwitch: a resolving pool keeps its acknowledged
// commits by default; RecentCommits -1, or resolution off, keeps none and
// asks nothing.
func TestRecentCommitsSwitch(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		wantOn bool
	}{
		{"default", func(*Config) {}, true},
		{"a size of its own", func(c *Config) { c.RecentCommits = 10 }, true},
		{"RecentCommits -1", func(c *Config) { c.RecentCommits = -1 }, false},
		{"resolution off", func(c *Config) { c.ResolveTimeout = -1 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, unreachableDSN)
			tt.mutate(cfg)
			p, err := NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			if on := p.acked != nil; on != tt.wantOn {
				t.Fatalf("kept: %v, want %v", on, tt.wantOn)
			}
			if s := p.Stats(); s.LostCommitCount|s.UnprovenCommitCount|s.SurvivedCommitCount != 0 {
				t.Errorf("a new pool counts %+v", s)
			}
		})
	}
}

// failoverTracer records a pool's failover events.
type failoverTracer struct {
	recordingTracer
	lost        chan failover.CommitLostData
	replication chan failover.ReplicationData
}

func (f *failoverTracer) TraceCommitLost(_ context.Context, d failover.CommitLostData) { f.lost <- d }
func (f *failoverTracer) TraceReplication(_ context.Context, d failover.ReplicationData) {
	f.replication <- d
}

// TestFailoverOverTheWire: a resolving pool keeps the id of a writing
// commit with its call's label; its first writing commit asks how the
// server replicates, and a server with a standby and no synchronous one is
// said asynchronous; a connection's first transaction on a later timeline
// asks that server about the commit, and its "committed", from a promoted
// standby whose replay stopped short of the commit's WAL mark, reaches the
// tracer as a lost commit, counted in Stats.
func TestFailoverOverTheWire(t *testing.T) {
	var timeline atomic.Int32
	timeline.Store(1)
	system := []fakepg.Column{{Name: "sys", OID: 20}, {Name: "rec", OID: 16}, {Name: "ok", OID: 16}, {Name: "pid", OID: 23},
		{Name: "tl", OID: 23}, {Name: "st", OID: 20}, {Name: "ep", OID: 20}, {Name: "fl", OID: 20}, {Name: "bs", OID: 20}, {Name: "em", OID: 16}}
	survey := []fakepg.Column{{Name: "sys", OID: 20}, {Name: "tl", OID: 23}, {Name: "st", OID: 20}, {Name: "ep", OID: 20},
		{Name: "timeline_id", OID: 23}, {Name: "lsn", OID: 20}, {Name: "next", OID: 20}, {Name: "shutdown", OID: 16},
		{Name: "statuses", OID: 1009}, {Name: "standbys", OID: 20}, {Name: "names", OID: 25}, {Name: "commit", OID: 25},
		{Name: "replay", OID: 20}, {Name: "replayed", OID: 16}}
	srv := &fakepg.Server{Answer: func(_ int, sql string) fakepg.Answer {
		tl := timeline.Load()
		switch {
		case strings.Contains(sql, "pg_stat_get_wal_senders"):
			statuses, standbys, replay := "{}", 1, 0
			if tl == 2 {
				// Promoted after replaying up to 4500, short of the mark.
				statuses, standbys, replay = `{"committed"}`, 0, 4500
			}
			return fakepg.Answer{Columns: survey, Rows: [][]any{{7, tl, 1000 * tl, 2000 * tl, tl, 9000, 900, false, statuses, standbys, "", "on", replay, replay != 0}}}
		case strings.Contains(sql, "pg_backend_pid()"):
			return fakepg.Answer{Columns: system, Rows: [][]any{{7, false, true, 1, tl, 1000 * tl, 2000 * tl, 4096, 0, true}}}
		case strings.HasPrefix(sql, "select pg_current_xact_id"):
			cols := []fakepg.Column{{Name: "pgtx_xid", OID: 20}, {Name: "l", OID: 20}, {Name: "timeline", OID: 23}, {Name: "start", OID: 20},
				{Name: "epoch", OID: 20}, {Name: "flushed", OID: 20}}
			return fakepg.Answer{Columns: cols, Rows: [][]any{{730, 5000, tl, 1000 * tl, 2000 * tl, 4096}}}
		}
		return fakepg.Answer{}
	}}
	tr := &failoverTracer{lost: make(chan failover.CommitLostData, 4), replication: make(chan failover.ReplicationData, 4)}
	pool := fakePool(t, srv, func(c *Config) {
		c.ResolveTimeout = 2 * time.Second
		c.Tracer = tr
	})
	ctx := context.Background()
	before := time.Now()
	err := TransactionWithOptions(ctx, pool, ReadCommitted, Options{Label: "transfer"}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, update)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if r := receive(t, tr.replication); r != (failover.ReplicationData{Asynchronous: true, Standbys: 1, SynchronousCommit: "on", Timeline: 1}) {
		t.Errorf("replication %+v, want asynchronous, one standby, timeline 1", r)
	}

	timeline.Store(2) // the standby, promoted
	pool.Pgxpool().Reset()
	// A transaction that writes nothing: the connection's capture meets
	// the new timeline.
	err = Transaction(ctx, pool, ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "select 1")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	l := receive(t, tr.lost)
	if l.Label != "transfer" || l.Xid != 730 || l.Timeline != 1 || l.NewTimeline != 2 || l.Status != "committed" ||
		l.CommittedAt.Before(before) || l.CommittedAt.After(after) {
		t.Errorf("lost %+v, want transfer's 730, committed during the call, timeline 1 → 2, committed (given again)", l)
	}
	if r := receive(t, tr.replication); r.Asynchronous || r.Standbys != 0 || r.Timeline != 2 {
		t.Errorf("replication %+v, want the new server without a standby", r)
	}
	if s := pool.Stats(); s.LostCommitCount != 1 || s.UnprovenCommitCount != 0 || s.SurvivedCommitCount != 0 {
		t.Errorf("stats: %d lost, %d unproven, %d survived; want 1 lost", s.LostCommitCount, s.UnprovenCommitCount, s.SurvivedCommitCount)
	}
}

// receive returns the next event of ch, and fails the test if none comes
// (a bound against a hang, not a measure).
func receive[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		var zero T
		t.Fatalf("no %T event", zero)
		return zero
	}
}
