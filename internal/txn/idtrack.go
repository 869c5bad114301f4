package txn

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/pgtx-go/pgtx/internal/connstate"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// idTracker knows what an attempt's statements read of its transaction's
// id, which resolving a lost COMMIT needs: the id read goes after each
// statement, in its write, until the transaction has an id (tracking), so
// that the id is known before COMMIT is sent and a write-free transaction
// takes none.
type idTracker struct {
	id resolve.ID // the id, when read (idRead; 0 with idNull when it had none then)

	kind    Kind    // what the transaction can be resolved with
	capture capture // what an id read reads
	emit    bool    // the id read writes the record of [resolve.ID].LSN
	idRead  bool
	idNull  bool
	// stale: anything sent since the id was read may have given it one;
	// notify: a notification may have been sent, which takes its id only
	// at COMMIT.
	stale  bool
	notify bool
}

// start readies x for a transaction on pgConn (whose state is st) of a
// pool that resolves or not; balanced: a read-only transaction that
// Pgpool-II may answer from a standby.
func (x *idTracker) start(resolving bool, pgConn *pgconn.PgConn, st *connstate.State, balanced bool) {
	x.kind, x.capture = kindOn(resolving, pgConn, st, balanced)
	if x.capture != captureNone {
		// The server's run as captured before the connection's first
		// transaction ([SetUp]): a direct connection's lives as long as
		// its backend (behind a pooler the id read captures it again).
		x.id = resolve.ID{System: st.Res.System, Run: st.Res.Run, Flushed: st.Res.Flushed}
		x.emit = st.Res.Emit
	}
}

// The id reads: NULL for a transaction without an id, which they do not
// give one; the forcing ones give it one (a notification's). With the id
// they read [resolve.ID].LSN: once the transaction has an id, they write a
// WAL record under it, an empty transactional logical message with prefix
// "pgtx" (the least WAL a plain role can write), and read its end, so that
// even a transaction whose writes are not logged (temporary and unlogged
// tables, a notification) has a record before its commit record. Where the
// role may not write it ([resolve.Conn].Emit), they read NULL instead.
const (
	idSQL          = "select pg_current_xact_id_if_assigned()::text::int8 as pgtx_xid, "
	idForcedSQL    = "select pg_current_xact_id()::text::int8 as pgtx_xid, "
	lsnSQL         = "(case when pg_current_xact_id_if_assigned() is not null then pg_logical_emit_message(true, 'pgtx', '') - '0/0'::pg_lsn end)::int8 as l"
	lsnForcedSQL   = "(pg_logical_emit_message(true, 'pgtx', '') - '0/0'::pg_lsn)::int8 as l"
	noLSNSQL       = "null::int8 as l"
	runSQL         = ", " + resolve.RunSQL
	idLSNSQL       = idSQL + lsnSQL
	idLSNForcedSQL = idForcedSQL + lsnForcedSQL
)

// idSQLs indexes the id reads by whether they write the record (emit),
// capture and forcing.
var idSQLs = [2][3][2]string{
	{captureID: {idSQL + noLSNSQL, idForcedSQL + noLSNSQL}, captureIDRun: {idSQL + noLSNSQL + runSQL, idForcedSQL + noLSNSQL + runSQL}},
	{captureID: {idLSNSQL, idLSNForcedSQL}, captureIDRun: {idLSNSQL + runSQL, idLSNForcedSQL + runSQL}},
}

// readSQL is the statement that reads the id.
func (x *idTracker) readSQL() string { return idSQLs[b2i(x.emit)][x.capture][b2i(x.notify)] }

// reads reports that the transaction's statements read its id: the pool
// resolves, and the server can be asked.
func (x *idTracker) reads() bool { return x.capture != captureNone }

// direct reports that the id is read on a connection that reaches its
// backend directly (its run was captured before its first transaction).
func (x *idTracker) direct() bool { return x.capture == captureID }

// preparedRead returns the name of the id read prepared on the connection
// (whose state is st) that this transaction runs, and false when the read
// goes inline ([PrepareReads]).
func (x *idTracker) preparedRead(st *connstate.State) (string, bool) {
	if !x.direct() || st == nil || !st.XidPrepared {
		return "", false
	}
	return executeXidNames[b2i(x.notify)], true
}

// simpleReadSQL is the id read sent in the simple protocol, after fn's
// first statement: the prepared read executed, or the read itself.
func (x *idTracker) simpleReadSQL(st *connstate.State) string {
	if _, ok := x.preparedRead(st); ok {
		return executeXidSQLs[b2i(x.notify)]
	}
	return x.readSQL()
}

// resolvedWith is what the transaction can be resolved with.
func (x *idTracker) resolvedWith() Kind { return x.kind }

// current returns the transaction's id as far as it was read.
func (x *idTracker) current() resolve.ID { return x.id }

// prepareXidSQL prepares the id reads of a direct connection, for
// executeXidSQLs, by whether they write the record.
func prepareXidSQL(emit bool) string {
	reads := idSQLs[b2i(emit)][captureID]
	return "prepare pgtx_xid as " + reads[0] + "; prepare pgtx_xid_forced as " + reads[1]
}

// executeXidNames are the names of the id reads prepareXidSQL prepares,
// without and with assigning an id, and executeXidSQLs run them.
var (
	executeXidNames = [2]string{"pgtx_xid", "pgtx_xid_forced"}
	executeXidSQLs  = [2]string{"execute pgtx_xid", "execute pgtx_xid_forced"}
)

// tracking reports that the statements fn sends still read the id after
// them: no read has found one yet, and no notification may have been sent.
// The read costs no round trip (it goes in the statement's write), and
// makes the id known before COMMIT is sent from the statement that gives it
// one, also after a statement that could not carry the read (one sent
// alone after BEGIN: a query with pgx's per-query options, a copy, a
// savepoint), whose COMMIT would otherwise read the id in its own write,
// where a connection cut as COMMIT left loses it.
func (x *idTracker) tracking() bool {
	return x.capture != captureNone && !x.notify && (!x.idRead || x.idNull)
}

// after records a statement sent after the first write: it may give the
// transaction an id the first write did not see.
func (x *idTracker) after() {
	if !x.idRead || x.idNull {
		x.stale = true
	}
}

// sentAlone records BEGIN, or a statement after it, sent without the id
// read: it may give the transaction an id no read saw.
func (x *idTracker) sentAlone() { x.stale = true }

// handedOut records that fn has the connection itself: what it sends there
// is not seen, may give the transaction an id and may send a notification.
func (x *idTracker) handedOut() { x.notify, x.stale = true, true }

// unread forgets that the id was read: the read is to come (in COMMIT's
// write), or what looked like it was fn's own result.
func (x *idTracker) unread() { x.idRead = false }

// found records the id that the transaction's backend told, after its id
// read was lost.
func (x *idTracker) found(xid uint64) { x.id.Xid = xid }

// scan notes a statement that may send a notification (NOTIFY, pg_notify):
// such a transaction takes its id only at COMMIT, so COMMIT's write reads
// it with one assigned. The test is on the text, so a notification sent by
// a function whose name does not say so is not seen.
func (x *idTracker) scan(sql string) {
	if !x.notify && containsFold(sql, "notify") {
		x.notify = true
	}
}

// containsFold reports whether s contains the lower-case ASCII word w,
// ignoring ASCII case.
func containsFold(s, w string) bool {
	for i := 0; i+len(w) <= len(s); i++ {
		j := 0
		for ; j < len(w); j++ {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != w[j] {
				break
			}
		}
		if j == len(w) {
			return true
		}
	}
	return false
}

// readID reads the id and its record's end, in text, and behind a pooler
// the server's run, and returns the read's error.
func (x *idTracker) readID(rr *pgconn.ResultReader) error {
	var r idRow
	got := false
	for rr.NextRow() {
		if row, ok := parseIDRow(rr.Values()); ok {
			r, got = row, true
		}
	}
	if _, err := rr.Close(); err != nil || !got {
		return err
	}
	x.set(r)
	return nil
}

// idRow is what one row of an id read says.
type idRow struct {
	xid, lsn uint64
	null     bool
	run      resolve.Run
	flushed  int64
}

// parseIDRow parses a row of an id read, in text: the id, its record's
// end, and behind a pooler the server's run.
func parseIDRow(v [][]byte) (r idRow, ok bool) {
	if len(v) < 2 {
		return r, false
	}
	r.null = v[0] == nil
	r.xid, _ = resolve.ParseUint(v[0])
	r.lsn, _ = resolve.ParseUint(v[1])
	if len(v) == 6 {
		r.run, r.flushed = resolve.ParseRun(v[2:])
	}
	return r, true
}

// set records what an id read found. The read went after every statement
// sent so far: none since can have given the transaction an id (stale).
func (x *idTracker) set(r idRow) {
	x.idRead, x.idNull, x.stale, x.id.Xid, x.id.LSN = true, r.null, false, r.xid, int64(r.lsn)
	if x.capture == captureIDRun {
		x.id.Run, x.id.Flushed = r.run, r.flushed
	}
}

// scanRow reads the id and, behind a pooler, the server's run, as set
// records them.
func (x *idTracker) scanRow(row pgx.Row) error {
	var xid, lsn pgtype.Int8
	var err error
	if x.capture == captureIDRun {
		err = row.Scan(&xid, &lsn, &x.id.Run.Timeline, &x.id.Run.Start, &x.id.Run.Epoch, &x.id.Flushed)
	} else {
		err = row.Scan(&xid, &lsn)
	}
	if err != nil {
		return err
	}
	x.idRead, x.idNull, x.stale = true, !xid.Valid, false
	x.id.Xid, x.id.LSN = uint64(xid.Int64), lsn.Int64
	return nil
}
