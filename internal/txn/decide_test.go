package txn

import "testing"

// idFacts is what a transaction's statements read of its id.
type idFacts struct{ idRead, idNull, stale, notify bool }

var (
	idKnown     = idFacts{idRead: true}                            // the first write gave it one
	idKnownLate = idFacts{idRead: true, stale: true}               // and statements since
	writeFree   = idFacts{idRead: true, idNull: true}              // none, nothing since
	noIDStale   = idFacts{idRead: true, idNull: true, stale: true} // none, statements since
	idUnread    = idFacts{}                                        // the first write did not read it
	notified    = idFacts{idRead: true, notify: true}              // a notification
	notifiedNil = idFacts{idRead: true, idNull: true, notify: true}
)

func (f idFacts) tracker(kind Kind) *idTracker {
	return &idTracker{kind: kind, idRead: f.idRead, idNull: f.idNull, stale: f.stale, notify: f.notify}
}

// TestIDAtCommit: when COMMIT's write must read the id, and when the
// transaction provably has none.
func TestIDAtCommit(t *testing.T) {
	tests := []struct {
		name          string
		f             idFacts
		want          bool
		wantWriteFree bool
	}{
		{"first write gave the id", idKnown, false, false},
		{"first write gave the id, statements since", idKnownLate, false, false},
		{"no id, nothing since: write-free", writeFree, false, true},
		{"no id, statements since", noIDStale, true, false},
		{"id not read", idUnread, true, false},
		{"a notification", notified, true, false},
		{"no id, a notification", notifiedNil, true, false},
	}
	for _, tt := range tests {
		tx := tt.f.tracker(Captured)
		if got := tx.idAtCommit(); got != tt.want {
			t.Errorf("%s: idAtCommit = %v, want %v", tt.name, got, tt.want)
		}
		if got := tx.writeFree(); got != tt.wantWriteFree {
			t.Errorf("%s: writeFree = %v, want %v", tt.name, got, tt.wantWriteFree)
		}
	}
}

// TestPlan: what ends the transaction for each combination of BEGIN sent,
// the transaction's status, its kind and what its statements read of its
// id.
func TestPlan(t *testing.T) {
	tests := []struct {
		name       string
		begun      bool
		status     byte
		kind       Kind
		f          idFacts
		recovering bool
		want       sending
	}{
		{"nothing sent", false, 'I', Captured, idUnread, false, sendNothing},
		{"nothing sent, failed status ignored", false, 'E', Plain, idUnread, false, sendNothing},
		{"failed inside fn", true, 'E', Captured, idKnown, false, sendRollback},
		{"failed inside fn, plain", true, 'E', Plain, idUnread, false, sendRollback},
		{"failed in recovery", true, 'E', InRecovery, idUnread, true, sendRollback},
		{"plain pool", true, 'T', Plain, idUnread, false, sendCommit},
		{"id known", true, 'T', Captured, idKnown, false, sendCommit},
		{"id known, statements since", true, 'T', Captured, idKnownLate, false, sendCommit},
		{"write-free", true, 'T', Captured, writeFree, false, sendCommitKeepingDeadline},
		{"no id, statements since", true, 'T', Captured, noIDStale, false, sendCommitReadingID},
		{"id not read", true, 'T', Captured, idUnread, false, sendCommitReadingID},
		{"a notification", true, 'T', Captured, notified, false, sendCommitReadingID},
		{"no id, a notification", true, 'T', Captured, notifiedNil, false, sendCommitReadingID},
		{"uncaptured: nothing to read", true, 'T', Uncaptured, idUnread, false, sendCommit},
		{"on a promoted standby's connection", true, 'T', OnPromoted, idUnread, false, sendCommit},
		{"in recovery still", true, 'T', InRecovery, idUnread, true, sendCommitKeepingDeadline},
		{"in recovery no more", true, 'T', InRecovery, idUnread, false, sendCommit},
	}
	for _, tt := range tests {
		if got := tt.f.tracker(tt.kind).plan(tt.begun, tt.status, tt.recovering); got != tt.want {
			t.Errorf("%s: plan = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestLost: what a COMMIT whose answer was lost leads to.
func TestLost(t *testing.T) {
	tests := []struct {
		name string
		kind Kind
		f    idFacts
		want lostAnswer
	}{
		{"plain pool", Plain, idKnown, lostUnknown},
		{"uncaptured", Uncaptured, idUnread, lostNotResolvable},
		{"in recovery", InRecovery, idUnread, lostNotResolvable},
		{"on a promoted standby's connection", OnPromoted, idUnread, lostNotResolvable},
		{"id never arrived", Captured, idUnread, lostAskBackend},
		{"no id at COMMIT", Captured, writeFree, lostNotApplied},
		{"the id read at COMMIT was NULL", Captured, noIDStale, lostNotApplied},
		{"id known", Captured, idKnown, lostResolve},
		{"id read assigned with a notification", Captured, notified, lostResolve},
	}
	for _, tt := range tests {
		if got := tt.f.tracker(tt.kind).lost(); got != tt.want {
			t.Errorf("%s: lost = %d, want %d", tt.name, got, tt.want)
		}
	}
}
