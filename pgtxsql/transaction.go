package pgtxsql

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// Transaction runs fn in a transaction of db and commits it when fn returns
// nil, with the contract of [pgtx.Transaction]: the whole transaction runs
// again on a conflict, a lost connection, an overload or a failover; when
// ctx ends, the running statement is cancelled on the server and the
// connection kept; a COMMIT whose answer was lost is resolved, or the error
// matches [pgtx.ErrCommitUnknown]. db must come from [Open] or [OpenDB].
// It is [TransactionWithOptions] with the zero [pgtx.Options].
//
// fn's *sql.Tx is of this attempt only; fn must not call its Commit or
// Rollback, nor return with its rows open: each is an error matching
// [pgtx.ErrInvalidArgument], and nothing is committed.
func Transaction(ctx context.Context, db *sql.DB, iso pgtx.Isolation, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return TransactionWithOptions(ctx, db, iso, pgtx.Options{}, fn)
}

// TransactionWithOptions is [Transaction] with per-call options, as
// [pgtx.TransactionWithOptions].
func TransactionWithOptions(ctx context.Context, db *sql.DB, iso pgtx.Isolation, opts pgtx.Options, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if fn == nil {
		return invalidArg("pgtxsql: fn is nil")
	}
	return Run(ctx, db, iso, opts, func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) }, fn)
}

// Run is [TransactionWithOptions] for a library that begins its
// transactions itself. In each attempt, begin begins the transaction with
// BeginTx on db and the context it is given (sqlx's BeginTxx, Bun's
// BeginTx, ent's Client.Tx); that BeginTx sends nothing and returns the
// attempt's transaction, which fn then uses. Run ends it with its Rollback,
// which sends nothing either, and commits when fn returns nil. A begin that
// begins no transaction with its context, or a second one, is an error
// matching [pgtx.ErrInvalidArgument]. The isolation and read-only mode are
// iso's and opts': a BeginTx asking for others is refused.
func Run[T interface{ Rollback() error }](ctx context.Context, db *sql.DB, iso pgtx.Isolation, opts pgtx.Options,
	begin func(ctx context.Context) (T, error), fn func(ctx context.Context, tx T) error) error {
	c := connectorOf(db)
	switch {
	case db == nil:
		return invalidArg("pgtxsql: db is nil: open it with pgtxsql.Open or pgtxsql.OpenDB")
	case c == nil:
		return invalidArg("pgtxsql: db was not opened by pgtxsql.Open or pgtxsql.OpenDB: its transactions would have none of pgtx's guarantees")
	case c.pool == nil:
		return errNoPool
	case begin == nil:
		return invalidArg("pgtxsql: begin is nil")
	case fn == nil:
		return invalidArg("pgtxsql: fn is nil")
	}
	level := sqlLevel(iso)
	return pgtx.TransactionWithOptions(ctx, c.pool, iso, opts, func(ctx context.Context, ptx pgx.Tx) (err error) {
		b := &binding{tx: ptx, iso: level, readOnly: opts.ReadOnly}
		ctx = context.WithValue(ctx, bindingKey{}, b)
		b.ctx = ctx
		t, err := begin(ctx)
		if err != nil {
			return err
		}
		defer func() {
			// Also on a panic in fn: database/sql's transaction is ended.
			b.ending.Store(true)
			_ = t.Rollback()
		}()
		if !b.begun.Load() {
			return invalidArg("pgtxsql: begin began no transaction with its ctx on the *sql.DB given to Run: " +
				"its transaction would run outside the call, once")
		}
		err = fn(ctx, t)
		if cerr := b.check(); err == nil {
			err = cerr
		}
		return err
	})
}

// sqlLevel is iso as database/sql names it; the pool refuses an unknown
// one before fn runs.
func sqlLevel(iso pgtx.Isolation) sql.IsolationLevel {
	switch iso {
	case pgtx.ReadCommitted:
		return sql.LevelReadCommitted
	case pgtx.RepeatableRead:
		return sql.LevelRepeatableRead
	case pgtx.Serializable:
		return sql.LevelSerializable
	}
	return sql.LevelDefault
}
