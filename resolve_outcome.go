package pgtx

import (
	"strconv"
)

// serverRun identifies one run of a PostgreSQL server: from a start or a
// crash recovery to the next. Within one run a transaction id names one
// transaction. Across runs it need not: crash recovery sets the next id
// past the ids its WAL mentions, so an id given before a crash whose records
// never reached the WAL is given again; a promoted standby gives ids from
// what it replayed.
type serverRun struct {
	// timeline is the server's timeline: a promotion starts a new one. 0
	// for a server in recovery.
	timeline int32
	// start is pg_postmaster_start_time (unix microseconds): a restart
	// changes it; a crash recovery the postmaster runs in place, after one
	// of its processes died, does not.
	start int64
	// epoch is the time the archiver's statistics were last reset (unix
	// microseconds). PostgreSQL discards its statistics at every crash
	// recovery, the in-place one included, and so sets it anew; a clean
	// restart keeps it. An administrator's pg_stat_reset_shared changes it
	// too, which only makes resolution more careful.
	epoch int64
}

// txID names a transaction for its resolution: its id, the system it ran
// on, the run of the server that gave the id, and how far that server's WAL
// was flushed when the run was captured (before the id was given), a
// position the WAL of every later run of the server reaches.
type txID struct {
	xid     uint64
	system  int64
	run     serverRun
	flushed int64
}

// checkpoint is what pg_control_checkpoint says of the server's latest
// checkpoint.
type checkpoint struct {
	timeline int32
	// lsn is the checkpoint record's WAL position.
	lsn int64
	// nextXid is the next transaction id when it was taken (epoch:xid as
	// one xid8).
	nextXid uint64
	// shutdown: taken while nothing ran, at a shutdown or at the end of a
	// crash recovery, before any new transaction: its redo point is its
	// own record. (With wal_level minimal an online checkpoint can look the
	// same, so it is never set there.)
	shutdown bool
}

// view is what one question found on the server it reached.
type view struct {
	system int64
	run    serverRun
	// status is pg_xact_status of the id, "not yet assigned" when the
	// server has not given it (yet), or "" when it no longer knows it (or
	// was not asked: another system, or in recovery).
	status string
	// prepared: the id is a prepared transaction's (which outlives a
	// restart in progress).
	prepared bool
	last     checkpoint
}

// The outcomes of one question.
type xactStatus int

const (
	statusUnreachable xactStatus = iota // no answer: ask again
	statusCommitted
	statusAborted    // not committed: run it again
	statusInProgress // still running: ask again
	statusUnknown    // nothing can tell
)

// Why an outcome is unknown.
type unknownReason int

const (
	reasonNone        unknownReason = iota
	reasonElsewhere                 // another system or timeline
	reasonRestarted                 // "committed" from a later run on the same timeline, not proven ours
	reasonForgotten                 // too old for the server to know
	reasonUnanswered                // no answer within ResolveTimeout
	reasonUnsupported               // the server cannot be asked
)

// judgement is the meaning of a view for a transaction.
type judgement struct {
	status xactStatus
	reason unknownReason // for statusUnknown
	// sameRun: the server is in the run that gave the id, so a backend
	// running the id runs this transaction and may be ended.
	sameRun bool
	// lost: the id is provably not in the history the server kept (the
	// transaction is not committed there), whatever became of the id since.
	lost bool
	why  string // for an unknown outcome: what the server said
}

// judge decides what a view says of transaction id, the outcome table of
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
//   - an id at or past the next id of the checkpoint that ended its run was
//     lost with that run;
//   - "in progress" is somebody else's transaction once the run that gave
//     the id is over (unless the id is a prepared transaction's).
//
// A server of another system, or on a timeline older than the
// transaction's, knows nothing of it; a server in recovery may lag the
// primary: it is asked again.
func judge(id txID, v view) judgement {
	switch {
	case v.system != id.system:
		return unknown(reasonElsewhere, "the server asked is another system (identifier "+
			strconv.FormatInt(v.system, 10)+", the transaction's "+strconv.FormatInt(id.system, 10)+")")
	case v.run.timeline == 0:
		return judgement{status: statusUnreachable}
	case v.run.timeline < id.run.timeline:
		return unknown(reasonElsewhere, "the server asked is on timeline "+itoa32(v.run.timeline)+
			", older than the transaction's "+itoa32(id.run.timeline))
	case v.run == id.run:
		return judgeSameRun(v)
	}
	next, exact, proven := provenBound(id, v)
	switch {
	case v.status == "not yet assigned", exact && id.xid >= next:
		return judgement{status: statusAborted, lost: true}
	case v.status == "aborted":
		return judgement{status: statusAborted}
	case v.status == "committed" && proven && id.xid < next:
		return judgement{status: statusCommitted}
	case v.status == "committed":
		why := reasonRestarted
		if v.run.timeline != id.run.timeline {
			why = reasonElsewhere // a failover: another server of the system
		}
		return unknown(why, "the server "+v.change(id)+" since the transaction began, and nothing proves that id "+
			strconv.FormatUint(id.xid, 10)+" was not given again: its \"committed\" may be another transaction's")
	case v.status == "in progress" && (v.prepared || (proven && id.xid < next)):
		// A prepared transaction outlives a restart; ask again.
		return judgement{status: statusInProgress}
	case v.status == "in progress" && v.run.start != id.run.start || v.status == "in progress" && v.run.timeline != id.run.timeline:
		// The run that gave the id is over: its backend died with it, so
		// another transaction runs the id, given again.
		return judgement{status: statusAborted, lost: true}
	case v.status == "in progress":
		// A crash recovery in place, or only a reset of statistics: ask
		// again, ending no backend.
		return judgement{status: statusInProgress}
	}
	return unknown(reasonForgotten, "the server no longer knows transaction "+strconv.FormatUint(id.xid, 10))
}

// judgeSameRun is the outcome table within the run that gave the id.
func judgeSameRun(v view) judgement {
	switch v.status {
	case "committed":
		return judgement{status: statusCommitted, sameRun: true}
	case "aborted":
		return judgement{status: statusAborted, sameRun: true}
	case "in progress":
		return judgement{status: statusInProgress, sameRun: true}
	case "not yet assigned":
		// The run that gave the id says it never did: nothing it says
		// about the id can be trusted.
		return unknown(reasonForgotten, "the server says it never gave the transaction's id")
	}
	return unknown(reasonForgotten, "the server no longer knows the transaction (its id is too old)")
}

// provenBound returns the next id of the server's latest checkpoint when
// that checkpoint bounds the ids the transaction's history had given
// before the server's run changed (proven), and whether it is exactly the
// checkpoint that ended the transaction's run (exact: every id at or past it
// was lost).
func provenBound(id txID, v view) (next uint64, exact, proven bool) {
	k := v.last
	switch {
	case k.timeline != id.run.timeline:
		// Not on the transaction's timeline: it says nothing of its ids.
		return 0, false, false
	case v.run.timeline > id.run.timeline:
		// Taken on the transaction's timeline before the promotion to the
		// server's (a promotion writes none at once): every id below its
		// next was given in the history the new timeline continues.
		return k.nextXid, false, true
	case k.shutdown && k.lsn >= id.flushed:
		// Written after the run was captured, with nothing running: the
		// shutdown or the end of crash recovery that ended the
		// transaction's run, before any new transaction.
		return k.nextXid, true, true
	}
	return 0, false, false
}

// change says how the server's run differs from the transaction's.
func (v view) change(id txID) string {
	switch {
	case v.run.timeline != id.run.timeline:
		return "was promoted (timeline " + itoa32(id.run.timeline) + " → " + itoa32(v.run.timeline) + ")"
	case v.run.start != id.run.start:
		return "restarted"
	}
	return "ran a crash recovery (or its statistics were reset)"
}

func unknown(r unknownReason, why string) judgement {
	return judgement{status: statusUnknown, reason: r, why: why}
}

func itoa32(n int32) string { return strconv.FormatInt(int64(n), 10) }
