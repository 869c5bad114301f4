package resolve

import (
	"strings"
	"testing"
)

// TestJudge is the outcome table of commit resolution (DESIGN.md, promise
// 3): what each answer of the server means for a transaction, within the
// run of the server that gave its id and after a restart, an in-place crash
// recovery, a promotion, a restored backup, another system or a standby.
func TestJudge(t *testing.T) {
	const sys = 7714471509565171385
	run := Run{Timeline: 1, Start: 1_000_000, Epoch: 1_000_500}
	id := ID{Xid: 730, System: sys, Run: run, Flushed: 5000}
	restarted := Run{Timeline: 1, Start: 2_000_000, Epoch: 2_000_100} // the postmaster started again
	reinit := Run{Timeline: 1, Start: run.Start, Epoch: 2_000_100}    // crash recovery in place
	promoted := Run{Timeline: 2, Start: 3_000_000, Epoch: 3_000_100}  // a standby of the system, promoted
	// The checkpoint that ended the transaction's run: shutdown-type,
	// written after the run was captured.
	boundary := func(next uint64) Checkpoint {
		return Checkpoint{Timeline: 1, LSN: 6000, NextXid: next, Shutdown: true}
	}
	online := Checkpoint{Timeline: 1, LSN: 7000, NextXid: 900}
	beforeRun := Checkpoint{Timeline: 1, LSN: 4000, NextXid: 700, Shutdown: true} // the one the run began with
	onOldTimeline := func(next uint64) Checkpoint { return Checkpoint{Timeline: 1, LSN: 4500, NextXid: next} }

	tests := []struct {
		name       string
		v          View
		want       Status
		wantLost   bool
		wantReason Reason
		wantSame   bool
	}{
		// Within the run that gave the id: the answer is the transaction's.
		{"same run, committed", View{System: sys, Run: run, Status: "committed"}, Committed, false, ReasonNone, true},
		{"same run, aborted", View{System: sys, Run: run, Status: "aborted"}, Aborted, false, ReasonNone, true},
		{"same run, in progress", View{System: sys, Run: run, Status: "in progress"}, InProgress, false, ReasonNone, true},
		{"same run, too old", View{System: sys, Run: run}, Unknown, false, Forgotten, false},
		{"same run, never given", View{System: sys, Run: run, Status: "not yet assigned"}, Unknown, false, Forgotten, false},

		// Not the server to ask.
		{"another system", View{System: sys + 1, Run: run, Status: "committed"}, Unknown, false, Elsewhere, false},
		{"a standby (in recovery)", View{System: sys, Run: Run{Start: 9}}, Unreachable, false, ReasonNone, false},

		// Restarted (an immediate stop and a start), the id given again.
		{"restart, reused id committed, past the end-of-recovery checkpoint's next id",
			View{System: sys, Run: restarted, Status: "committed", Last: boundary(730)}, Aborted, true, ReasonNone, false},
		{"restart, id not yet given again", View{System: sys, Run: restarted, Status: "not yet assigned", Last: boundary(725)},
			Aborted, true, ReasonNone, false},
		{"restart, id kept by the WAL, committed", View{System: sys, Run: restarted, Status: "committed", Last: boundary(731)},
			Committed, false, ReasonNone, false},
		{"restart, id kept by the WAL, aborted", View{System: sys, Run: restarted, Status: "aborted", Last: boundary(731)},
			Aborted, false, ReasonNone, false},
		{"restart, a checkpoint since: committed is not proven", View{System: sys, Run: restarted, Status: "committed", Last: online},
			Unknown, false, Restarted, false},
		{"restart, a checkpoint since: aborted", View{System: sys, Run: restarted, Status: "aborted", Last: online},
			Aborted, false, ReasonNone, false},
		{"restart, reused id in progress", View{System: sys, Run: restarted, Status: "in progress", Last: online},
			Aborted, true, ReasonNone, false},
		{"restart, a prepared transaction in progress", View{System: sys, Run: restarted, Status: "in progress", Prepared: true, Last: online},
			InProgress, false, ReasonNone, false},
		{"restart, too old", View{System: sys, Run: restarted, Last: online}, Unknown, false, Forgotten, false},

		// Crash recovery in place (same postmaster).
		{"reinit, reused id committed", View{System: sys, Run: reinit, Status: "committed", Last: boundary(730)},
			Aborted, true, ReasonNone, false},
		{"reinit, id kept, committed", View{System: sys, Run: reinit, Status: "committed", Last: boundary(800)},
			Committed, false, ReasonNone, false},
		{"reinit or a reset of statistics, in progress: ask again", View{System: sys, Run: reinit, Status: "in progress", Last: online},
			InProgress, false, ReasonNone, false},
		// Only the statistics were reset: the latest checkpoint is the one
		// the run began with, which proves nothing.
		{"statistics reset, committed", View{System: sys, Run: reinit, Status: "committed", Last: beforeRun},
			Unknown, false, Restarted, false},

		// A restored backup started in place: crash recovery from the
		// backup, same timeline; the id lies past what it kept.
		{"restored backup, reused id committed", View{System: sys, Run: restarted, Status: "committed", Last: boundary(650)},
			Aborted, true, ReasonNone, false},

		// Promoted standby, a later timeline.
		{"promotion, the old timeline's checkpoint proves the id older", View{System: sys, Run: promoted, Status: "committed", Last: onOldTimeline(731)},
			Committed, false, ReasonNone, false},
		{"promotion, id past the old timeline's checkpoint", View{System: sys, Run: promoted, Status: "committed", Last: onOldTimeline(700)},
			Unknown, false, Elsewhere, false},
		{"promotion, a checkpoint on the new timeline", View{System: sys, Run: promoted, Status: "committed", Last: Checkpoint{Timeline: 2, LSN: 9000, NextXid: 900, Shutdown: true}},
			Unknown, false, Elsewhere, false},
		{"promotion, aborted", View{System: sys, Run: promoted, Status: "aborted", Last: onOldTimeline(700)},
			Aborted, false, ReasonNone, false},
		{"promotion, not yet given", View{System: sys, Run: promoted, Status: "not yet assigned", Last: onOldTimeline(700)},
			Aborted, true, ReasonNone, false},
		{"promotion, reused id in progress", View{System: sys, Run: promoted, Status: "in progress", Last: onOldTimeline(700)},
			Aborted, true, ReasonNone, false},
	}
	// The old primary, back on the old timeline, asked about a transaction
	// of the promoted standby's: its history does not hold it.
	onNew := ID{Xid: 730, System: sys, Run: promoted, Flushed: 9000}
	if j := Judge(onNew, View{System: sys, Run: restarted, Status: "aborted", Last: boundary(800)}); j.Status != Unknown || j.Reason != Elsewhere {
		t.Errorf("asked an older timeline: judge = %+v, want unknown, elsewhere", j)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := Judge(id, tt.v)
			if j.Status != tt.want || j.Lost != tt.wantLost || j.Reason != tt.wantReason || j.SameRun != tt.wantSame {
				t.Errorf("judge = %+v, want status %d lost %v reason %d sameRun %v", j, tt.want, tt.wantLost, tt.wantReason, tt.wantSame)
			}
			if (j.Status == Unknown) != (j.Why != "") {
				t.Errorf("why = %q: an unknown outcome, and only it, says why", j.Why)
			}
		})
	}
}

// TestJudgeNeverBelievesALaterRunWithoutProof: for every kind of change of
// run and every latest checkpoint that is not the one that ended the
// transaction's run, "committed" is never believed unless the Checkpoint
// predates a promotion and the id is below its next id.
func TestJudgeNeverBelievesALaterRunWithoutProof(t *testing.T) {
	const sys = 42
	id := ID{Xid: 1000, System: sys, Run: Run{Timeline: 3, Start: 10, Epoch: 11}, Flushed: 500}
	runs := []Run{
		{Timeline: 3, Start: 20, Epoch: 21}, // restarted
		{Timeline: 3, Start: 10, Epoch: 21}, // reinitialised, or statistics reset
		{Timeline: 4, Start: 20, Epoch: 21}, // promoted
	}
	for _, r := range runs {
		for _, k := range []Checkpoint{
			{Timeline: 3, LSN: 400, NextXid: 2000, Shutdown: true}, // before the capture
			{Timeline: 3, LSN: 600, NextXid: 2000},                 // online, after
			{Timeline: 4, LSN: 600, NextXid: 2000, Shutdown: true}, // on the new timeline
			{Timeline: 2, LSN: 600, NextXid: 2000, Shutdown: true}, // an older timeline
		} {
			j := Judge(id, View{System: sys, Run: r, Status: "committed", Last: k})
			proofByPromotion := r.Timeline > id.Run.Timeline && k.Timeline == id.Run.Timeline
			if j.Status == Committed && !proofByPromotion {
				t.Errorf("run %+v, checkpoint %+v: believed \"committed\" without proof", r, k)
			}
			if j.Status == Unknown && !strings.Contains(j.Why, "may be another transaction's") {
				t.Errorf("why = %q, want it to say the answer may be another transaction's", j.Why)
			}
		}
	}
}
