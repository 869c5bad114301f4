package pgtx

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
	run := serverRun{timeline: 1, start: 1_000_000, epoch: 1_000_500}
	id := txID{xid: 730, system: sys, run: run, flushed: 5000}
	restarted := serverRun{timeline: 1, start: 2_000_000, epoch: 2_000_100} // the postmaster started again
	reinit := serverRun{timeline: 1, start: run.start, epoch: 2_000_100}    // crash recovery in place
	promoted := serverRun{timeline: 2, start: 3_000_000, epoch: 3_000_100}  // a standby of the system, promoted
	// The checkpoint that ended the transaction's run: shutdown-type,
	// written after the run was captured.
	boundary := func(next uint64) checkpoint {
		return checkpoint{timeline: 1, lsn: 6000, nextXid: next, shutdown: true}
	}
	online := checkpoint{timeline: 1, lsn: 7000, nextXid: 900}
	beforeRun := checkpoint{timeline: 1, lsn: 4000, nextXid: 700, shutdown: true} // the one the run began with
	onOldTimeline := func(next uint64) checkpoint { return checkpoint{timeline: 1, lsn: 4500, nextXid: next} }

	tests := []struct {
		name       string
		v          view
		want       xactStatus
		wantLost   bool
		wantReason unknownReason
		wantSame   bool
	}{
		// Within the run that gave the id: the answer is the transaction's.
		{"same run, committed", view{system: sys, run: run, status: "committed"}, statusCommitted, false, reasonNone, true},
		{"same run, aborted", view{system: sys, run: run, status: "aborted"}, statusAborted, false, reasonNone, true},
		{"same run, in progress", view{system: sys, run: run, status: "in progress"}, statusInProgress, false, reasonNone, true},
		{"same run, too old", view{system: sys, run: run}, statusUnknown, false, reasonForgotten, false},
		{"same run, never given", view{system: sys, run: run, status: "not yet assigned"}, statusUnknown, false, reasonForgotten, false},

		// Not the server to ask.
		{"another system", view{system: sys + 1, run: run, status: "committed"}, statusUnknown, false, reasonElsewhere, false},
		{"a standby (in recovery)", view{system: sys, run: serverRun{start: 9}}, statusUnreachable, false, reasonNone, false},

		// Restarted (an immediate stop and a start), the id given again.
		{"restart, reused id committed, past the end-of-recovery checkpoint's next id",
			view{system: sys, run: restarted, status: "committed", last: boundary(730)}, statusAborted, true, reasonNone, false},
		{"restart, id not yet given again", view{system: sys, run: restarted, status: "not yet assigned", last: boundary(725)},
			statusAborted, true, reasonNone, false},
		{"restart, id kept by the WAL, committed", view{system: sys, run: restarted, status: "committed", last: boundary(731)},
			statusCommitted, false, reasonNone, false},
		{"restart, id kept by the WAL, aborted", view{system: sys, run: restarted, status: "aborted", last: boundary(731)},
			statusAborted, false, reasonNone, false},
		{"restart, a checkpoint since: committed is not proven", view{system: sys, run: restarted, status: "committed", last: online},
			statusUnknown, false, reasonRestarted, false},
		{"restart, a checkpoint since: aborted", view{system: sys, run: restarted, status: "aborted", last: online},
			statusAborted, false, reasonNone, false},
		{"restart, reused id in progress", view{system: sys, run: restarted, status: "in progress", last: online},
			statusAborted, true, reasonNone, false},
		{"restart, a prepared transaction in progress", view{system: sys, run: restarted, status: "in progress", prepared: true, last: online},
			statusInProgress, false, reasonNone, false},
		{"restart, too old", view{system: sys, run: restarted, last: online}, statusUnknown, false, reasonForgotten, false},

		// Crash recovery in place (same postmaster).
		{"reinit, reused id committed", view{system: sys, run: reinit, status: "committed", last: boundary(730)},
			statusAborted, true, reasonNone, false},
		{"reinit, id kept, committed", view{system: sys, run: reinit, status: "committed", last: boundary(800)},
			statusCommitted, false, reasonNone, false},
		{"reinit or a reset of statistics, in progress: ask again", view{system: sys, run: reinit, status: "in progress", last: online},
			statusInProgress, false, reasonNone, false},
		// Only the statistics were reset: the latest checkpoint is the one
		// the run began with, which proves nothing.
		{"statistics reset, committed", view{system: sys, run: reinit, status: "committed", last: beforeRun},
			statusUnknown, false, reasonRestarted, false},

		// A restored backup started in place: crash recovery from the
		// backup, same timeline; the id lies past what it kept.
		{"restored backup, reused id committed", view{system: sys, run: restarted, status: "committed", last: boundary(650)},
			statusAborted, true, reasonNone, false},

		// Promoted standby, a later timeline.
		{"promotion, the old timeline's checkpoint proves the id older", view{system: sys, run: promoted, status: "committed", last: onOldTimeline(731)},
			statusCommitted, false, reasonNone, false},
		{"promotion, id past the old timeline's checkpoint", view{system: sys, run: promoted, status: "committed", last: onOldTimeline(700)},
			statusUnknown, false, reasonElsewhere, false},
		{"promotion, a checkpoint on the new timeline", view{system: sys, run: promoted, status: "committed", last: checkpoint{timeline: 2, lsn: 9000, nextXid: 900, shutdown: true}},
			statusUnknown, false, reasonElsewhere, false},
		{"promotion, aborted", view{system: sys, run: promoted, status: "aborted", last: onOldTimeline(700)},
			statusAborted, false, reasonNone, false},
		{"promotion, not yet given", view{system: sys, run: promoted, status: "not yet assigned", last: onOldTimeline(700)},
			statusAborted, true, reasonNone, false},
		{"promotion, reused id in progress", view{system: sys, run: promoted, status: "in progress", last: onOldTimeline(700)},
			statusAborted, true, reasonNone, false},
	}
	// The old primary, back on the old timeline, asked about a transaction
	// of the promoted standby's: its history does not hold it.
	onNew := txID{xid: 730, system: sys, run: promoted, flushed: 9000}
	if j := judge(onNew, view{system: sys, run: restarted, status: "aborted", last: boundary(800)}); j.status != statusUnknown || j.reason != reasonElsewhere {
		t.Errorf("asked an older timeline: judge = %+v, want unknown, elsewhere", j)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := judge(id, tt.v)
			if j.status != tt.want || j.lost != tt.wantLost || j.reason != tt.wantReason || j.sameRun != tt.wantSame {
				t.Errorf("judge = %+v, want status %d lost %v reason %d sameRun %v", j, tt.want, tt.wantLost, tt.wantReason, tt.wantSame)
			}
			if (j.status == statusUnknown) != (j.why != "") {
				t.Errorf("why = %q: an unknown outcome, and only it, says why", j.why)
			}
		})
	}
}

// TestJudgeNeverBelievesALaterRunWithoutProof: for every kind of change of
// run and every latest checkpoint that is not the one that ended the
// transaction's run, "committed" is never believed unless the checkpoint
// predates a promotion and the id is below its next id.
func TestJudgeNeverBelievesALaterRunWithoutProof(t *testing.T) {
	const sys = 42
	id := txID{xid: 1000, system: sys, run: serverRun{timeline: 3, start: 10, epoch: 11}, flushed: 500}
	runs := []serverRun{
		{timeline: 3, start: 20, epoch: 21}, // restarted
		{timeline: 3, start: 10, epoch: 21}, // reinitialised, or statistics reset
		{timeline: 4, start: 20, epoch: 21}, // promoted
	}
	for _, r := range runs {
		for _, k := range []checkpoint{
			{timeline: 3, lsn: 400, nextXid: 2000, shutdown: true}, // before the capture
			{timeline: 3, lsn: 600, nextXid: 2000},                 // online, after
			{timeline: 4, lsn: 600, nextXid: 2000, shutdown: true}, // on the new timeline
			{timeline: 2, lsn: 600, nextXid: 2000, shutdown: true}, // an older timeline
		} {
			j := judge(id, view{system: sys, run: r, status: "committed", last: k})
			proofByPromotion := r.timeline > id.run.timeline && k.timeline == id.run.timeline
			if j.status == statusCommitted && !proofByPromotion {
				t.Errorf("run %+v, checkpoint %+v: believed \"committed\" without proof", r, k)
			}
			if j.status == statusUnknown && !strings.Contains(j.why, "may be another transaction's") {
				t.Errorf("why = %q, want it to say the answer may be another transaction's", j.why)
			}
		}
	}
}
