package resolve

import "testing"

// TestSurvival is the table of what a later run of a server says of a
// commit an earlier run acknowledged: only a later run of the same system,
// out of recovery, judges; every answer but "committed" proves the commit
// gone; "committed" is believed only when the id is proven given in the
// shared history, and is otherwise unproven, never discarded, unless the
// id is proven given again.
func TestSurvival(t *testing.T) {
	const sys = 7714471509565171385
	run := Run{Timeline: 1, Start: 1_000_000, Epoch: 1_000_500}
	id := ID{Xid: 730, System: sys, Run: run, Flushed: 5000}
	promoted := Run{Timeline: 2, Start: 3_000_000, Epoch: 3_000_100}
	restarted := Run{Timeline: 1, Start: 2_000_000, Epoch: 2_000_100}
	reinit := Run{Timeline: 1, Start: run.Start, Epoch: 2_000_100}
	// The standby's latest restartpoint, still on the transaction's
	// timeline just after its promotion (before its first checkpoint).
	onOldTimeline := func(next uint64) Checkpoint { return Checkpoint{Timeline: 1, LSN: 4500, NextXid: next} }
	onNewTimeline := Checkpoint{Timeline: 2, LSN: 9000, NextXid: 900}
	// The checkpoint that ended the transaction's run: shutdown-type,
	// written after the run was captured.
	boundary := func(next uint64) Checkpoint { return Checkpoint{Timeline: 1, LSN: 6000, NextXid: next, Shutdown: true} }
	online := Checkpoint{Timeline: 1, LSN: 7000, NextXid: 900}

	tests := []struct {
		name string
		v    View
		mark int64 // the end of the id's WAL mark (0: none)
		want Verdict
	}{
		// Who may judge.
		{"the same run", View{System: sys, Run: run, Status: "committed"}, 0, Undecided},
		{"another system", View{System: sys + 1, Run: promoted, Status: "aborted"}, 0, Undecided},
		{"a standby (in recovery)", View{System: sys, Run: Run{Start: 9}, Status: "aborted"}, 0, Undecided},
		{"an earlier start on the timeline", View{System: sys, Run: Run{Timeline: 1, Start: 500, Epoch: 600}, Status: "aborted"}, 0, Undecided},

		// A failover: the promoted standby's answer.
		{"promoted, not yet assigned", View{System: sys, Run: promoted, Status: "not yet assigned", Last: onNewTimeline}, 0, Discarded},
		{"promoted, aborted", View{System: sys, Run: promoted, Status: "aborted", Last: onNewTimeline}, 0, Discarded},
		{"promoted, given again and in progress", View{System: sys, Run: promoted, Status: "in progress", Last: onNewTimeline}, 0, Discarded},
		{"promoted, committed, a checkpoint on the new timeline: unproven",
			View{System: sys, Run: promoted, Status: "committed", Last: onNewTimeline}, 0, Unproven},
		{"promoted, committed, below the old timeline's checkpoint's next id",
			View{System: sys, Run: promoted, Status: "committed", Last: onOldTimeline(731)}, 0, Survived},
		{"promoted, committed, at the old timeline's checkpoint's next id: unproven",
			View{System: sys, Run: promoted, Status: "committed", Last: onOldTimeline(730)}, 0, Unproven},
		{"promoted, too old", View{System: sys, Run: promoted, Last: onNewTimeline}, 0, Unproven},

		// A failover judged by where the promoted standby's replay stopped
		// (the id's WAL mark ends at 5200).
		{"promoted, committed, replayed past the mark",
			View{System: sys, Run: promoted, Status: "committed", Last: onNewTimeline, Replay: 5300, Replayed: true}, 5200, Survived},
		{"promoted, committed, replayed exactly to the mark",
			View{System: sys, Run: promoted, Status: "committed", Last: onNewTimeline, Replay: 5200, Replayed: true}, 5200, Survived},
		{"promoted, committed (given again), replay short of the mark",
			View{System: sys, Run: promoted, Status: "committed", Last: onNewTimeline, Replay: 5100, Replayed: true}, 5200, Discarded},
		{"promoted, committed, replay short of the mark after a crash recovery",
			View{System: sys, Run: promoted, Status: "committed", Last: onNewTimeline, Replay: 5100}, 5200, Discarded},
		{"promoted, committed, replayed past the mark but restarted since: unproven",
			View{System: sys, Run: promoted, Status: "committed", Last: onNewTimeline, Replay: 5300}, 5200, Unproven},
		{"promoted, committed, no mark: unproven",
			View{System: sys, Run: promoted, Status: "committed", Last: onNewTimeline, Replay: 5300, Replayed: true}, 0, Unproven},
		{"promoted twice, committed, replayed past the mark: unproven",
			View{System: sys, Run: Run{Timeline: 3, Start: 4_000_000, Epoch: 4_000_100}, Status: "committed", Last: Checkpoint{Timeline: 3, LSN: 9900, NextXid: 990}, Replay: 5300, Replayed: true}, 5200, Unproven},

		// A restart or a crash recovery in place.
		{"restart, kept by the WAL", View{System: sys, Run: restarted, Status: "committed", Last: boundary(731)}, 0, Survived},
		{"restart, given again past the end-of-recovery checkpoint's next id",
			View{System: sys, Run: restarted, Status: "committed", Last: boundary(730)}, 0, Discarded},
		{"restart, a checkpoint since: unproven", View{System: sys, Run: restarted, Status: "committed", Last: online}, 0, Unproven},
		{"restart, aborted", View{System: sys, Run: restarted, Status: "aborted", Last: online}, 0, Discarded},
		{"crash recovery in place, kept", View{System: sys, Run: reinit, Status: "committed", Last: boundary(800)}, 0, Survived},
		{"crash recovery in place, given again", View{System: sys, Run: reinit, Status: "in progress", Last: online}, 0, Discarded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := id
			id.LSN = tt.mark
			if got := Survival(id, tt.v); got != tt.want {
				t.Errorf("Survival = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRunAfter: a promotion, a restart and a crash recovery in place each
// make a later run; the same run, an older timeline or an earlier start do
// not.
func TestRunAfter(t *testing.T) {
	r := Run{Timeline: 2, Start: 100, Epoch: 200}
	tests := []struct {
		o    Run
		want bool
	}{
		{Run{Timeline: 2, Start: 100, Epoch: 200}, false},
		{Run{Timeline: 1, Start: 900, Epoch: 900}, true},
		{Run{Timeline: 3, Start: 1, Epoch: 1}, false},
		{Run{Timeline: 2, Start: 50, Epoch: 900}, true},
		{Run{Timeline: 2, Start: 150, Epoch: 1}, false},
		{Run{Timeline: 2, Start: 100, Epoch: 150}, true},
		{Run{Timeline: 2, Start: 100, Epoch: 250}, false},
	}
	for _, tt := range tests {
		if got := r.After(tt.o); got != tt.want {
			t.Errorf("%+v.After(%+v) = %v, want %v", r, tt.o, got, tt.want)
		}
	}
}
