package pgtxsql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// tx is the driver's transaction: the attempt's (b set), whose COMMIT is
// Transaction's, or one of the connection's own (own set).
type tx struct {
	c   *conn
	q   querier
	b   *binding
	own pgx.Tx
	ctx context.Context // an own transaction's BeginTx context
}

// Commit implements [driver.Tx]. The attempt's transaction is committed by
// Transaction when fn returns: fn's Commit is refused.
func (t *tx) Commit() error {
	t.c.tx = nil
	if t.b != nil {
		return t.b.refuse("Commit")
	}
	ctx, cancel := bounded(t.ctx, t.c.c.commitTimeout)
	defer cancel()
	return t.own.Commit(ctx)
}

// Rollback implements [driver.Tx]. For the attempt's transaction it sends
// nothing: Transaction rolls it back, or cancels its statement on the
// server when the context ended. fn's own Rollback is refused.
func (t *tx) Rollback() error {
	t.c.tx = nil
	if t.b != nil {
		return t.b.release()
	}
	ctx, cancel := bounded(t.ctx, t.c.c.rollbackTimeout)
	defer cancel()
	return t.own.Rollback(ctx)
}

// bounded is ctx without its end, within d: COMMIT and ROLLBACK are not
// interrupted by the caller's context, which would close the connection.
func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx = context.WithoutCancel(ctx)
	if d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// binding ties an attempt of Transaction or Run to the one BeginTx of the
// *sql.DB that fn's context makes.
type binding struct {
	tx       pgx.Tx // the attempt's
	ctx      context.Context
	iso      sql.IsolationLevel
	readOnly bool

	begun   atomic.Bool
	ending  atomic.Bool  // Run ends the transaction: Rollback is not fn's
	open    atomic.Int32 // rows of the transaction still open
	mu      sync.Mutex
	misused string // the method fn should not have called
}

type bindingKey struct{}

func bindingOf(ctx context.Context) *binding {
	b, _ := ctx.Value(bindingKey{}).(*binding)
	return b
}

// begin takes the binding for a BeginTx whose options must agree with the
// call's.
func (b *binding) begin(opts driver.TxOptions) error {
	if iso := sql.IsolationLevel(opts.Isolation); iso != sql.LevelDefault && iso != b.iso &&
		!(iso == sql.LevelSnapshot && b.iso == sql.LevelRepeatableRead) {
		return invalidArg("pgtxsql: BeginTx asked for isolation " + iso.String() + ", but the call's is " + b.iso.String() +
			": say the isolation in Transaction's or Run's iso only")
	}
	if opts.ReadOnly && !b.readOnly {
		return invalidArg("pgtxsql: BeginTx asked for a read-only transaction: set pgtx.Options.ReadOnly instead")
	}
	if !b.begun.CompareAndSwap(false, true) {
		return invalidArg("fn began a second transaction with its ctx: an attempt has one transaction; " +
			"pass the transaction down, or begin another after the call returns")
	}
	return nil
}

// release ends the attempt's transaction for database/sql. A Rollback
// that neither Run nor the context's end made is fn's, and refused.
func (b *binding) release() error {
	if b.ending.Load() || b.ctx.Err() != nil {
		return nil
	}
	return b.refuse("Rollback")
}

func (b *binding) refuse(method string) error {
	b.mu.Lock()
	if b.misused == "" {
		b.misused = method
	}
	b.mu.Unlock()
	return invalidArg("fn called tx." + method + ": the call commits when fn returns nil and rolls back when it returns an error")
}

// check reports fn's misuse of the transaction, once fn has returned.
func (b *binding) check() error {
	b.mu.Lock()
	m := b.misused
	b.mu.Unlock()
	if m != "" {
		return invalidArg("fn called tx." + m + " itself: the call commits when fn returns nil and rolls back when it returns an error; nothing was committed")
	}
	if b.open.Load() > 0 {
		return invalidArg("fn returned with rows still open: close every rows (rows.Close, or read them to the end) before fn returns")
	}
	return nil
}
