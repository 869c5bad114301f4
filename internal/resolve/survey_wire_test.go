package resolve

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/internal/fakepg"
)

// surveyColumns are the columns of surveySQL's row.
var surveyColumns = []fakepg.Column{{Name: "sys", OID: 20}, {Name: "tl", OID: 23}, {Name: "st", OID: 20}, {Name: "ep", OID: 20},
	{Name: "timeline_id", OID: 23}, {Name: "lsn", OID: 20}, {Name: "next", OID: 20}, {Name: "shutdown", OID: 16},
	{Name: "statuses", OID: 1009}, {Name: "standbys", OID: 20}, {Name: "names", OID: 25}, {Name: "commit", OID: 25},
	{Name: "replay", OID: 20}, {Name: "replayed", OID: 16}}

// TestSurveyOverTheWire: a survey sends the ids as one array and the
// system as parameters, and reads the server's run, checkpoint, each id's
// status in order, how it replicates and where its replay stopped; a server that cannot judge (no
// statuses) gives none; a lost answer is an error.
func TestSurveyOverTheWire(t *testing.T) {
	srv := &fakepg.Server{Answer: answerSQL(surveySQL,
		fakepg.Answer{Columns: surveyColumns, Rows: [][]any{{7, 3, 1000, 2000, 2, 4096, 1<<32 | 900, false,
			`{committed,aborted,"not yet assigned",""}`, 1, "", "on", 8192, true}}},
		fakepg.Answer{Columns: surveyColumns, Rows: [][]any{{7, 0, 1000, 2000, 2, 4096, 900, false, nil, 0, "*", "on", 0, false}}},
		fakepg.Answer{Close: true},
	)}
	r := NewResolver(4*time.Second, nil, fakeConfig(t, srv), nil)
	ctx := context.Background()

	s, err := r.Survey(ctx, 7, []uint64{1<<32 | 700, 701, 702, 703})
	want := View{System: 7, Run: Run{Timeline: 3, Start: 1000, Epoch: 2000}, Last: Checkpoint{Timeline: 2, LSN: 4096, NextXid: 1<<32 | 900},
		Replay: 8192, Replayed: true}
	if err != nil || s.View != want || !slices.Equal(s.Statuses, []string{"committed", "aborted", "not yet assigned", ""}) ||
		s.Replication != (Replication{Standbys: 1, SynchronousCommit: "on"}) || !s.Replication.Asynchronous() {
		t.Errorf("survey %+v, %v; want %+v, the four statuses, one asynchronous standby", s, err, want)
	}
	sent := srv.Log()
	if p := sent[len(sent)-1].Params; len(p) != 2 || *p[0] != "{4294967996,701,702,703}" || *p[1] != "7" {
		t.Errorf("parameters %v, want the ids as an array and the system", p)
	}
	s, err = r.Survey(ctx, 7, nil)
	if err != nil || s.Statuses != nil || s.View.Run.Timeline != 0 || s.Replication.Asynchronous() {
		t.Errorf("survey of a standby: %+v, %v; want no statuses, synchronous", s, err)
	}
	if _, err := r.Survey(ctx, 7, nil); err == nil {
		t.Error("a survey whose answer was lost answered")
	}
}

// TestReplicationAsynchronous: a server acknowledges commits that no
// standby has when standbys stream and its commits wait for none.
func TestReplicationAsynchronous(t *testing.T) {
	tests := []struct {
		r    Replication
		want bool
	}{
		{Replication{Standbys: 0, SynchronousCommit: "on"}, false},
		{Replication{Standbys: 2, SynchronousCommit: "on"}, true},
		{Replication{Standbys: 1, SynchronousStandbyNames: "ANY 1 (a, b)", SynchronousCommit: "on"}, false},
		{Replication{Standbys: 1, SynchronousStandbyNames: "*", SynchronousCommit: "remote_apply"}, false},
		{Replication{Standbys: 1, SynchronousStandbyNames: "*", SynchronousCommit: "local"}, true},
		{Replication{Standbys: 1, SynchronousStandbyNames: "*", SynchronousCommit: "off"}, true},
	}
	for _, tt := range tests {
		if got := tt.r.Asynchronous(); got != tt.want {
			t.Errorf("%+v.Asynchronous() = %v, want %v", tt.r, got, tt.want)
		}
	}
}
