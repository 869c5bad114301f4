package resolve

// Verdict is what a later run of a server says of a commit that an earlier
// run acknowledged: whether the history the later run continues has it.
type Verdict int

// The verdicts on an acknowledged commit.
const (
	// Undecided: the server asked cannot judge: another system, a server
	// in recovery, or a run that is not later than the commit's. Ask a
	// later run.
	Undecided Verdict = iota
	// Survived: the server's history has the commit.
	Survived
	// Discarded: the server's history provably lacks the commit. A
	// failover discarded it (an asynchronous standby promoted before it
	// had the commit), or a crash did (a commit acknowledged before it was
	// flushed, with synchronous_commit off).
	Discarded
	// Unproven: the server says "committed", and nothing proves that the
	// id was not given again there to another transaction; or it no longer
	// knows the id. The commit may have survived or not.
	Unproven
)

// String returns the verdict's name.
func (v Verdict) String() string {
	switch v {
	case Survived:
		return "survived"
	case Discarded:
		return "discarded"
	case Unproven:
		return "unproven"
	}
	return "undecided"
}

// After reports whether r is a later run of the same server than o: a
// later timeline (a promotion), or the same timeline after a restart (a
// later postmaster start) or a crash recovery in place (a later
// statistics epoch).
func (r Run) After(o Run) bool {
	switch {
	case r.Timeline != o.Timeline:
		return r.Timeline > o.Timeline
	case r.Start != o.Start:
		return r.Start > o.Start
	}
	return r.Epoch > o.Epoch
}

// Survival judges v, what a server said of the status of id, a
// transaction whose COMMIT an earlier run of that server acknowledged.
// Only a later run of the same system, out of recovery, can judge; then:
//   - "aborted", "in progress" and "not yet assigned" prove that the commit
//     is not in the server's history: in the history it shares with the
//     transaction's run the transaction did not commit, or the id was never
//     given there, or it was given again, after the transaction's run
//     ended, to a transaction that has not committed;
//   - "committed" is the transaction's own only when it is proven so
//     ([ownAnswer]): a standby promoted from the transaction's timeline
//     replayed past the end of the transaction's WAL record, or the id is
//     proven given in the shared history; a promoted standby whose replay
//     stopped short of that record, or an id past the next id of the
//     checkpoint that ended the transaction's run, proves the commit lost;
//     otherwise nothing tells;
//   - no status (the id is too old for the server) tells nothing.
func Survival(id ID, v View) Verdict {
	if v.System != id.System || v.Run.Timeline == 0 || !v.Run.After(id.Run) {
		return Undecided
	}
	switch v.Status {
	case "aborted", "in progress", "not yet assigned":
		return Discarded
	case "committed":
		return ownAnswer(id, v)
	}
	return Unproven
}

// ownAnswer judges a later run's "committed" about id: Survived when the
// answer is proven the transaction's own, Discarded when the commit is
// proven outside that run's history, Unproven otherwise. The proofs are
// those of [Judge]: on a standby promoted from the transaction's timeline,
// where its replay stopped ([judgeBranch]); else the server's latest
// checkpoint bounds the ids of the transaction's timeline ([provenBound]),
// and an id past the next id of the checkpoint that ended the
// transaction's run was given again since.
func ownAnswer(id ID, v View) Verdict {
	if j, ok := judgeBranch(id, v); ok {
		switch {
		case j.Lost:
			return Discarded
		case j.Status == Committed:
			return Survived
		}
		return Unproven
	}
	next, exact, proven := provenBound(id, v)
	switch {
	case exact && id.Xid >= next:
		return Discarded
	case proven && id.Xid < next:
		return Survived
	}
	return Unproven
}
