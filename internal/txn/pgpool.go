package txn

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/connstate"
	"github.com/pgtx-go/pgtx/internal/pgpool"
)

// Behind Pgpool-II, which sends each statement to a node of its choosing,
// BEGIN goes first, alone, so that the transaction's own statements are
// routed as the transaction's: Pgpool-II routes a statement when it parses
// it, and a statement sent with BEGIN would be parsed (prepared) before
// BEGIN runs, as if outside any transaction, and answered by a standby.
// BEGIN's write holds simple queries only (Pgpool-II answers each before it
// reads the next), in one round trip:
//
//   - a read-write transaction: BEGIN, then SET LOCAL statement_timeout,
//     which makes it a writing transaction for Pgpool-II from the start, so
//     that it sends every later statement to the primary (re-parsing there
//     a statement a standby parsed) and the id reads too;
//   - a balanced read-only transaction: the session's statement_timeout
//     set before BEGIN (inside the transaction a SET would make it a
//     writing one, and every later statement would go to the primary),
//     restored with COMMIT or ROLLBACK ([restoreTimeoutSQL]); it reads no
//     id (the read would go to the primary) and changes nothing.

// restoreTimeoutSQL restores the session's statement_timeout after a
// balanced read-only transaction that set it.
const restoreTimeoutSQL = "reset statement_timeout"

// readOnly reports a BEGIN statement of [BeginSQL] that begins a read-only
// transaction.
func readOnly(beginSQL string) bool { return strings.Contains(beginSQL, " read only") }

// beginPgpool sends BEGIN behind Pgpool-II, with the transaction's
// statement_timeout.
func (w *writer) beginPgpool(ctx context.Context) error {
	w.beginSent = true
	ms, ok := statementTimeout(ctx, w.timeout, w.s.SessionTimeout)
	var stmts []string
	switch {
	case w.balanced && ok:
		w.st.RestoreTimeout = true
		stmts = []string{"set statement_timeout = " + strconv.FormatInt(ms, 10), w.beginSQL}
	case w.balanced:
		stmts = []string{w.beginSQL}
	case ok:
		stmts = []string{w.beginSQL, "set local statement_timeout = " + strconv.FormatInt(ms, 10)}
	default:
		stmts = []string{w.beginSQL, "set local statement_timeout to default"}
	}
	res, err := pgpool.Run(ctx, w.pgConn, stmts...)
	for i := 0; err == nil && i < len(res); i++ {
		err = res[i].Err
	}
	if err != nil {
		w.beginErr = err
	}
	return err
}

// endTransaction ends the transaction open on pgConn with end (COMMIT or
// ROLLBACK) and returns its command tag. After a balanced read-only
// transaction that set the session's statement_timeout, the same write
// restores it (a failed restore is left to the connection's next acquire).
func endTransaction(ctx context.Context, pgConn *pgconn.PgConn, end string) (pgconn.CommandTag, error) {
	st := connstate.Of(pgConn)
	if st == nil || !st.RestoreTimeout {
		return execTag(ctx, pgConn, end)
	}
	res, err := pgpool.Run(ctx, pgConn, end, restoreTimeoutSQL)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if res[1].Err == nil {
		st.RestoreTimeout = false
	}
	return res[0].Tag, res[0].Err
}
