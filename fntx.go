package pgtx

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fnTx is the pgx.Tx that fn receives: pgx's transaction, except that
// Commit and Rollback are refused. Transaction ends the transaction itself
// (COMMIT when fn returns nil, ROLLBACK otherwise); a transaction fn ended
// on its own would leave Transaction committing nothing, or reporting a
// COMMIT it never sent as an unknown outcome.
type fnTx struct {
	pgx.Tx
	ended string // "Commit" or "Rollback" once fn called it
}

// Commit refuses to commit: Transaction commits when fn returns nil.
func (t *fnTx) Commit(context.Context) error { return t.refuse("Commit") }

// Rollback refuses to roll back: Transaction rolls back when fn returns an
// error.
func (t *fnTx) Rollback(context.Context) error { return t.refuse("Rollback") }

func (t *fnTx) refuse(method string) error {
	if t.ended == "" {
		t.ended = method
	}
	return t.misuse(nil)
}

// misuse is the error of a call whose fn called Commit or Rollback; fnErr,
// fn's own error, stays reachable.
func (t *fnTx) misuse(fnErr error) error {
	e := &invalidArgError{msg: fmt.Sprintf("fn called tx.%s: Transaction ends the transaction itself "+
		"(COMMIT when fn returns nil, ROLLBACK when it returns an error); return instead. Nothing was committed", t.ended)}
	if fnErr == nil {
		return e
	}
	return &misuseError{invalidArgError: e, fnErr: fnErr}
}

// check finds what fn left behind that COMMIT cannot follow: a call of
// Commit or Rollback, rows still open (the connection is busy reading
// them), or a COMMIT or ROLLBACK statement of its own.
func (t *fnTx) check(pgConn *pgconn.PgConn) error {
	switch {
	case t.ended != "":
		return t.misuse(nil)
	case pgConn.IsBusy():
		return &invalidArgError{msg: "fn returned with rows still open: close every pgx.Rows (rows.Close, or read them to the end) " +
			"before fn returns. Nothing was committed"}
	case pgConn.TxStatus() == 'I':
		return &invalidArgError{msg: "fn ended the transaction itself with a COMMIT or ROLLBACK statement, which took effect as sent; " +
			"leave ending the transaction to Transaction"}
	}
	return nil
}

// misuseError is a misuse error that also carries the error fn returned.
type misuseError struct {
	*invalidArgError
	fnErr error
}

func (e *misuseError) Unwrap() error { return e.fnErr }
