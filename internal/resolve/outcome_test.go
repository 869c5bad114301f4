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

// TestJudgeBranch: a server promoted from the transaction's timeline is
// judged by where its replay of that timeline stopped (pg_last_wal_replay_lsn)
// against the end of a record the transaction wrote under its id (LSN): short
// of it, the commit is not in the new history, whatever the status says; at
// or past it, in the run that was promoted, the status is the transaction's.
// A replay position that is not the branch point (a crash recovery or a
// restart since the promotion, two promotions) proves nothing.
func TestJudgeBranch(t *testing.T) {
	const sys = 7714471509565171385
	run := Run{Timeline: 3, Start: 1_000_000, Epoch: 1_000_500}
	id := ID{Xid: 730, System: sys, Run: run, Flushed: 5000, LSN: 8000}
	promoted := Run{Timeline: 4, Start: 900_000, Epoch: 900_100}
	// HA managers checkpoint right after a promotion: the latest checkpoint
	// is on the new timeline, which proves nothing by itself.
	newCkpt := Checkpoint{Timeline: 4, LSN: 9500, NextXid: 760}
	view := func(r Run, status string, replay int64, replayed bool) View {
		return View{System: sys, Run: r, Status: status, Last: newCkpt, Replay: replay, Replayed: replayed}
	}
	crashed := Run{Timeline: 4, Start: promoted.Start, Epoch: 2_000_000} // a crash recovery in place since
	restarted := Run{Timeline: 4, Start: 2_000_000, Epoch: 2_000_100}
	endOfRecovery := Checkpoint{Timeline: 4, LSN: 9900, NextXid: 731, Shutdown: true}
	tests := []struct {
		name       string
		id         ID
		v          View
		want       Status
		wantLost   bool
		wantReason Reason
	}{
		{"replayed past the record, committed", id, view(promoted, "committed", 8200, true), Committed, false, ReasonNone},
		{"replayed exactly to the record's end, committed", id, view(promoted, "committed", 8000, true), Committed, false, ReasonNone},
		{"replayed past the record, aborted", id, view(promoted, "aborted", 8200, true), Aborted, false, ReasonNone},
		{"replayed past the record, a prepared transaction", id, view(promoted, "in progress", 8200, true), InProgress, false, ReasonNone},
		{"replayed past the record, too old", id, view(promoted, "", 8200, true), Unknown, false, Forgotten},
		{"replayed past the record, never given: not this history", id, view(promoted, "not yet assigned", 8200, true), Unknown, false, Elsewhere},
		// S below L_X: the id was given again on the new timeline.
		{"stopped short of the record, the id given again and committed", id, view(promoted, "committed", 7999, true), Aborted, true, ReasonNone},
		{"stopped short of the record, in progress", id, view(promoted, "in progress", 7000, true), Aborted, true, ReasonNone},
		// A later replay position is still past the branch point: short of
		// the record proves as much.
		{"crash recovery since, its replay short of the record", id, view(crashed, "committed", 7500, false), Aborted, true, ReasonNone},
		// The guards: a replay position that is not the branch point.
		{"crash recovery since, its replay past the record, committed", id,
			View{System: sys, Run: crashed, Status: "committed", Last: endOfRecovery, Replay: 9900}, Unknown, false, Elsewhere},
		{"crash recovery since, an online checkpoint after it, committed", id, view(crashed, "committed", 9900, false), Unknown, false, Elsewhere},
		{"restart with recovery since, committed", id, view(restarted, "committed", 9900, false), Unknown, false, Elsewhere},
		{"clean restart since (no replay), committed", id, view(restarted, "committed", 0, false), Unknown, false, Elsewhere},
		{"two promotions, replayed past the record, committed", id,
			view(Run{Timeline: 5, Start: 3_000_000, Epoch: 3_000_100}, "committed", 8200, true), Unknown, false, Elsewhere},
		{"two promotions, short of the record, committed", id,
			view(Run{Timeline: 5, Start: 3_000_000, Epoch: 3_000_100}, "committed", 7000, true), Unknown, false, Elsewhere},
		{"no record position (read lost), committed", ID{Xid: 730, System: sys, Run: run, Flushed: 5000},
			view(promoted, "committed", 8200, true), Unknown, false, Elsewhere},
		{"no record position, the old timeline's checkpoint still proves it", ID{Xid: 730, System: sys, Run: run, Flushed: 5000},
			View{System: sys, Run: promoted, Status: "committed", Last: Checkpoint{Timeline: 3, LSN: 4500, NextXid: 731}}, Committed, false, ReasonNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := Judge(tt.id, tt.v)
			if j.Status != tt.want || j.Lost != tt.wantLost || j.Reason != tt.wantReason || j.SameRun {
				t.Errorf("judge = %+v, want status %d lost %v reason %d", j, tt.want, tt.wantLost, tt.wantReason)
			}
			if (j.Status == Unknown) != (j.Why != "") {
				t.Errorf("why = %q: an unknown outcome, and only it, says why", j.Why)
			}
		})
	}
}

// TestJudgeBranchNeverBelievesAnotherReplay: over every replay position,
// archive-recovery flag and timeline of a server of the system, a
// "committed" from a later timeline is believed only by the old timeline's
// checkpoint, or by a replay in the promoted run (archive recovery) of the
// next timeline that reached the transaction's record.
func TestJudgeBranchNeverBelievesAnotherReplay(t *testing.T) {
	const sys = 42
	id := ID{Xid: 1000, System: sys, Run: Run{Timeline: 3, Start: 10, Epoch: 11}, Flushed: 500, LSN: 800}
	for _, tl := range []int32{4, 5} {
		for _, replay := range []int64{0, 799, 800, 801} {
			for _, replayed := range []bool{false, true} {
				for _, k := range []Checkpoint{{Timeline: tl, LSN: 900, NextXid: 2000}, {Timeline: tl, LSN: 900, NextXid: 2000, Shutdown: true}} {
					v := View{System: sys, Run: Run{Timeline: tl, Start: 20, Epoch: 21}, Status: "committed", Last: k, Replay: replay, Replayed: replayed}
					j := Judge(id, v)
					proof := tl == id.Run.Timeline+1 && replayed && replay >= id.LSN
					if (j.Status == Committed) != proof {
						t.Errorf("view %+v: judged %+v; the replay proves committed: %v", v, j, proof)
					}
				}
			}
		}
	}
}
