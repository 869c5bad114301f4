package txn

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgtx-go/pgtx/internal/errs"
)

// What fn may not do with its transaction, and the errors that say so.

func (t *Tx) refuse(method string) error {
	if t.closed.Load() {
		// The attempt is over and its connection back in the pool: nothing
		// of it may be read or changed.
		return pgx.ErrTxClosed
	}
	if t.ended == "" {
		t.ended = method
	}
	if t.w.endedBySQL() {
		// A statement of fn's ended the transaction before: saying that
		// nothing was committed would be false.
		return endedError(nil)
	}
	return misuse(t.ended, nil)
}

// misuse is the error of a call whose fn called Commit or Rollback (the
// method ended); fnErr, fn's own error, stays reachable.
func misuse(ended string, fnErr error) error {
	e := &errs.InvalidArgError{Msg: fmt.Sprintf("fn called tx.%s: Transaction ends the transaction itself "+
		"(COMMIT when fn returns nil, ROLLBACK when it returns an error); return instead. Nothing was committed", ended)}
	if fnErr == nil {
		return e
	}
	return &errs.MisuseError{InvalidArgError: e, FnErr: fnErr}
}

// endedBySQL reports that the transaction is over although Transaction
// has not ended it: BEGIN went out and fn's Commit and Rollback send
// nothing, so a statement of fn's own ended it (COMMIT, END,
// ROLLBACK, ABORT or PREPARE TRANSACTION). A closed connection ended
// nothing by a statement; COMMIT AND CHAIN and ROLLBACK AND CHAIN leave a
// transaction open and are not seen. A connection still reading fn's
// rows has not read BEGIN's status yet, so it ended nothing that is known.
func (w *writer) endedBySQL() bool {
	return w.beginSent && w.beginErr == nil && !w.pgConn.IsClosed() && !w.pgConn.IsBusy() && w.pgConn.TxStatus() == 'I'
}

// endedError is the error of a call whose fn ended the transaction with a
// statement. Which statement it was cannot be known (its command tag went
// to fn), so it says what each one did; fnErr, fn's own error when it
// returned one, stays reachable.
func endedError(fnErr error) error {
	e := &errs.InvalidArgError{Msg: "fn ended the transaction itself with a statement, which the server ran as sent: " +
		"a COMMIT or END committed fn's statements before it (rolled them back if the transaction had failed), " +
		"a ROLLBACK or ABORT discarded them, and statements after it committed one by one. " +
		"Transaction committed and rolled back nothing after it, and does not run fn again; " +
		"leave ending the transaction to Transaction (return nil to commit, an error to roll back)"}
	if fnErr == nil {
		return e
	}
	return &errs.MisuseError{InvalidArgError: e, FnErr: fnErr}
}

// errRowsOpen is the message of a fn that returned with rows still open.
const errRowsOpen = "fn returned with rows still open: close every pgx.Rows (rows.Close, or read them to the end) " +
	"before fn returns. Nothing was committed"

// Check finds what fn, which returned nil, left behind that COMMIT cannot
// follow: a COMMIT or ROLLBACK statement of its own, a call of Commit or
// Rollback, or rows still open (the connection is busy reading them). The
// error matches ErrInvalidArgument.
func (t *Tx) Check() error {
	return leftBehind(t.w.endedBySQL(), t.ended, t.w.busy())
}

// busy reports that the connection is still reading fn's rows.
func (w *writer) busy() bool { return w.pgConn.IsBusy() }

// leftBehind is Check's decision: a transaction a statement ended, the fn
// method that ended it, rows still open.
func leftBehind(endedBySQL bool, ended string, busy bool) error {
	switch {
	case endedBySQL:
		return endedError(nil)
	case ended != "":
		return misuse(ended, nil)
	case busy:
		return &errs.InvalidArgError{Msg: errRowsOpen}
	}
	return nil
}

// CheckFailed is Check for a fn that returned fnErr: a statement of fn's
// that ended the transaction, or a call of Commit or Rollback, makes the
// call's error misuse, which keeps fnErr and is never retried (fn ran
// again after a COMMIT of its own would commit its work twice); nil
// otherwise.
func (t *Tx) CheckFailed(fnErr error) error {
	switch {
	case t.w.endedBySQL():
		return endedError(fnErr)
	case t.ended != "":
		return misuse(t.ended, fnErr)
	}
	return nil
}
