package resolve

import (
	"strconv"
)

// Run identifies one run of a PostgreSQL server: from a start or a
// crash recovery to the next. Within one run a transaction id names one
// transaction. Across runs it need not: crash recovery sets the next id
// past the ids its WAL mentions, so an id given before a crash whose records
// never reached the WAL is given again; a promoted standby gives ids from
// what it replayed.
type Run struct {
	// Timeline is the server's timeline: a promotion starts a new one. 0
	// for a server in recovery.
	Timeline int32
	// Start is pg_postmaster_start_time (unix microseconds): a restart
	// changes it; a crash recovery the postmaster runs in place, after one
	// of its processes died, does not.
	Start int64
	// Epoch is the time the archiver's statistics were last reset (unix
	// microseconds). PostgreSQL discards its statistics at every crash
	// recovery, the in-place one included, and so sets it anew; a clean
	// restart keeps it. An administrator's pg_stat_reset_shared changes it
	// too, which only makes resolution more careful.
	Epoch int64
}

// ID names a transaction for its resolution: its id, the system it ran
// on, the run of the server that gave the id, how far that server's WAL
// was flushed when the run was captured (before the id was given), a
// position the WAL of every later run of the server reaches, and LSN.
type ID struct {
	Xid     uint64
	System  int64
	Run     Run
	Flushed int64
	// LSN is the end of a WAL record the transaction wrote under its id
	// once it had one, before its commit record (0: unknown): a server
	// that replayed the WAL up to it gives only later ids, and one that
	// stopped short of it never replayed the commit.
	LSN int64
}

// Checkpoint is what pg_control_checkpoint says of the server's latest
// checkpoint.
type Checkpoint struct {
	Timeline int32
	// LSN is the checkpoint record's WAL position.
	LSN int64
	// NextXid is the next transaction id when it was taken (epoch:xid as
	// one xid8).
	NextXid uint64
	// Shutdown: taken while nothing ran, at a shutdown or at the end of a
	// crash recovery, before any new transaction: its redo point is its
	// own record. (With wal_level minimal an online checkpoint can look the
	// same, so it is never set there.)
	Shutdown bool
}

// View is what one question found on the server it reached.
type View struct {
	System int64
	Run    Run
	// Status is pg_xact_status of the id, "not yet assigned" when the
	// server has not given it (yet), or "" when it no longer knows it (or
	// was not asked: another system, or in recovery).
	Status string
	// Prepared: the id is a prepared transaction's (which outlives a
	// restart in progress).
	Prepared bool
	Last     Checkpoint
	// Replay is pg_last_wal_replay_lsn (0 when NULL): where the server's
	// run stopped replaying WAL. Replayed says the run replayed a commit
	// or abort record in archive recovery (pg_last_xact_replay_timestamp
	// is set), as a standby does and a crash recovery never does: on a
	// promoted server, Replay is then where its timeline branched off.
	Replay   int64
	Replayed bool
}

// Status is the outcome of one question.
type Status int

// The outcomes of one question.
const (
	Unreachable Status = iota // no answer: ask again
	Committed
	Aborted    // not committed: run it again
	InProgress // still running: ask again
	Unknown    // nothing can tell
)

// Reason says why an outcome is unknown.
type Reason int

// The reasons of an unknown outcome.
const (
	ReasonNone  Reason = iota
	Elsewhere          // another system or timeline
	Restarted          // "committed" from a later run on the same timeline, not proven ours
	Forgotten          // too old for the server to know
	Unanswered         // no answer within ResolveTimeout
	Unsupported        // the server cannot be asked
)

// Judgement is the meaning of a view for a transaction.
type Judgement struct {
	Status Status
	Reason Reason // for Unknown
	// SameRun: the server is in the run that gave the id, so a backend
	// running the id runs this transaction and may be ended.
	SameRun bool
	// Lost: the id is provably not in the history the server kept (the
	// transaction is not committed there), whatever became of the id since.
	Lost bool
	Why  string // for an unknown outcome: what the server said
}

// Judge decides what a view says of transaction id, the outcome table of
// commit resolution. Within the run that gave the id, the server's answer
// is the transaction's. After a restart, an in-place crash recovery or a
// promotion, the id may have been given again, so:
//   - "aborted" and "not yet assigned" mean the transaction is not in the
//     history the server kept: run it again;
//   - "committed" is believed only when the id is proven older than the
//     change of run: the server's latest checkpoint is the one that ended the
//     transaction's run on its timeline (a shutdown-type checkpoint written
//     after the run was captured) and the id is below its next id, or the
//     checkpoint is on the transaction's timeline and the server has since
//     been promoted to a later one, and the id is below its next id;
//   - on a standby promoted from the transaction's timeline, where its
//     replay stopped says which side of the branch the transaction's
//     record lies on ([judgeBranch]);
//   - an id at or past the next id of the checkpoint that ended its run was
//     lost with that run;
//   - "in progress" is somebody else's transaction once the run that gave
//     the id is over (unless the id is a prepared transaction's).
//
// A server of another system, or on a timeline older than the
// transaction's, knows nothing of it; a server in recovery may lag the
// primary: it is asked again.
func Judge(id ID, v View) Judgement {
	switch {
	case v.System != id.System:
		return unknown(Elsewhere, "the server asked is another system (identifier "+
			strconv.FormatInt(v.System, 10)+", the transaction's "+strconv.FormatInt(id.System, 10)+")")
	case v.Run.Timeline == 0:
		return Judgement{Status: Unreachable}
	case v.Run.Timeline < id.Run.Timeline:
		return unknown(Elsewhere, "the server asked is on timeline "+itoa32(v.Run.Timeline)+
			", older than the transaction's "+itoa32(id.Run.Timeline))
	case v.Run == id.Run:
		return judgeSameRun(v)
	}
	if j, ok := judgeBranch(id, v); ok {
		return j
	}
	next, exact, proven := provenBound(id, v)
	switch {
	case v.Status == "not yet assigned", exact && id.Xid >= next:
		return Judgement{Status: Aborted, Lost: true}
	case v.Status == "aborted":
		return Judgement{Status: Aborted}
	case v.Status == "committed" && proven && id.Xid < next:
		return Judgement{Status: Committed}
	case v.Status == "committed":
		why := Restarted
		if v.Run.Timeline != id.Run.Timeline {
			why = Elsewhere // a failover: another server of the system
		}
		return unknown(why, "the server "+v.change(id)+" since the transaction began, and nothing proves that id "+
			strconv.FormatUint(id.Xid, 10)+" was not given again: its \"committed\" may be another transaction's")
	case v.Status == "in progress" && (v.Prepared || (proven && id.Xid < next)):
		// A prepared transaction outlives a restart; ask again.
		return Judgement{Status: InProgress}
	case v.Status == "in progress" && v.Run.Start != id.Run.Start || v.Status == "in progress" && v.Run.Timeline != id.Run.Timeline:
		// The run that gave the id is over: its backend died with it, so
		// another transaction runs the id, given again.
		return Judgement{Status: Aborted, Lost: true}
	case v.Status == "in progress":
		// A crash recovery in place, or only a reset of statistics: ask
		// again, ending no backend.
		return Judgement{Status: InProgress}
	}
	return unknown(Forgotten, "the server no longer knows transaction "+strconv.FormatUint(id.Xid, 10))
}

// judgeSameRun is the outcome table within the run that gave the id.
func judgeSameRun(v View) Judgement {
	switch v.Status {
	case "committed":
		return Judgement{Status: Committed, SameRun: true}
	case "aborted":
		return Judgement{Status: Aborted, SameRun: true}
	case "in progress":
		return Judgement{Status: InProgress, SameRun: true}
	case "not yet assigned":
		// The run that gave the id says it never did: nothing it says
		// about the id can be trusted.
		return unknown(Forgotten, "the server says it never gave the transaction's id")
	}
	return unknown(Forgotten, "the server no longer knows the transaction (its id is too old)")
}

// judgeBranch judges the answer of a server promoted from the
// transaction's timeline (the next timeline) by where its replay of the
// transaction's timeline stopped, when that tells ([View].Replay). Any
// position a run of the promoted server replayed to is at or past the
// branch point, so one short of the transaction's LSN proves that its
// commit record, written after LSN, is not in the new timeline's history.
// At or past LSN, and when the run is the one that was promoted (it
// replayed in archive recovery), the server replayed a record of the
// transaction's id before it gave any id itself, and every id it gave is
// later: its status of the id is the transaction's.
func judgeBranch(id ID, v View) (Judgement, bool) {
	if v.Run.Timeline != id.Run.Timeline+1 || id.LSN == 0 || v.Replay == 0 {
		return Judgement{}, false
	}
	switch {
	case v.Replay < id.LSN:
		return Judgement{Status: Aborted, Lost: true}, true
	case !v.Replayed:
		// A crash recovery since the promotion, or a restart: its replay
		// stopped later than the branch point.
		return Judgement{}, false
	}
	switch v.Status {
	case "committed":
		return Judgement{Status: Committed}, true
	case "aborted":
		return Judgement{Status: Aborted}, true
	case "in progress":
		return Judgement{Status: InProgress}, true // a prepared transaction: ask again
	case "not yet assigned":
		return unknown(Elsewhere, "the promoted server replayed transaction "+strconv.FormatUint(id.Xid, 10)+
			"'s WAL and says it never gave its id: its history is not the transaction's"), true
	}
	return unknown(Forgotten, "the server no longer knows transaction "+strconv.FormatUint(id.Xid, 10)), true
}

// provenBound returns the next id of the server's latest checkpoint when
// that checkpoint bounds the ids the transaction's history had given
// before the server's run changed (proven), and whether it is exactly the
// checkpoint that ended the transaction's run (exact: every id at or past it
// was lost).
func provenBound(id ID, v View) (next uint64, exact, proven bool) {
	k := v.Last
	switch {
	case k.Timeline != id.Run.Timeline:
		// Not on the transaction's timeline: it says nothing of its ids.
		return 0, false, false
	case v.Run.Timeline > id.Run.Timeline:
		// Taken on the transaction's timeline before the promotion to the
		// server's (a promotion writes none at once): every id below its
		// next was given in the history the new timeline continues.
		return k.NextXid, false, true
	case k.Shutdown && k.LSN >= id.Flushed:
		// Written after the run was captured, with nothing running: the
		// shutdown or the end of crash recovery that ended the
		// transaction's run, before any new transaction.
		return k.NextXid, true, true
	}
	return 0, false, false
}

// change says how the server's run differs from the transaction's.
func (v View) change(id ID) string {
	switch {
	case v.Run.Timeline != id.Run.Timeline:
		return "was promoted (timeline " + itoa32(id.Run.Timeline) + " → " + itoa32(v.Run.Timeline) + ")"
	case v.Run.Start != id.Run.Start:
		return "restarted"
	}
	return "ran a crash recovery (or its statistics were reset)"
}

func unknown(r Reason, why string) Judgement {
	return Judgement{Status: Unknown, Reason: r, Why: why}
}

func itoa32(n int32) string { return strconv.FormatInt(int64(n), 10) }
