package txn

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/internal/errs"
)

// savepoint is a pseudo nested transaction of an attempt: pgx's, refusing
// every method once the attempt has ended.
type savepoint struct {
	pgx.Tx
	t *Tx
}

// inSavepoint refuses a savepoint's method once the attempt has ended, and
// notes sql, a statement sent in the savepoint.
func (t *Tx) inSavepoint(ctx context.Context, sql string) error {
	if t.closed.Load() {
		return pgx.ErrTxClosed
	}
	return t.w.inSavepoint(ctx, sql)
}

// batchInSavepoint is inSavepoint for the statements of b.
func (t *Tx) batchInSavepoint(ctx context.Context, b *pgx.Batch) error {
	if err := t.inSavepoint(ctx, ""); err != nil {
		return err
	}
	t.w.scanBatch(b)
	return nil
}

// Begin starts a savepoint inside this one.
func (s *savepoint) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := s.t.inSavepoint(ctx, ""); err != nil {
		return nil, err
	}
	sp, err := s.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &savepoint{Tx: sp, t: s.t}, nil
}

// Commit releases the savepoint.
func (s *savepoint) Commit(ctx context.Context) error {
	if err := s.t.inSavepoint(ctx, ""); err != nil {
		return err
	}
	return s.Tx.Commit(ctx)
}

// Rollback rolls back to the savepoint.
func (s *savepoint) Rollback(ctx context.Context) error {
	if err := s.t.inSavepoint(ctx, ""); err != nil {
		return err
	}
	return s.Tx.Rollback(ctx)
}

// CopyFrom runs COPY FROM in the savepoint.
func (s *savepoint) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := s.t.inSavepoint(ctx, ""); err != nil {
		return 0, err
	}
	return s.Tx.CopyFrom(ctx, table, columns, src)
}

// SendBatch sends b in the savepoint.
func (s *savepoint) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := s.t.batchInSavepoint(ctx, b); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return s.Tx.SendBatch(ctx, b)
}

// Prepare prepares a statement.
func (s *savepoint) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := s.t.inSavepoint(ctx, sql); err != nil {
		return nil, err
	}
	return s.Tx.Prepare(ctx, name, sql)
}

// Exec runs a statement in the savepoint.
func (s *savepoint) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := s.t.inSavepoint(ctx, sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	return s.Tx.Exec(ctx, sql, args...)
}

// Query runs a query in the savepoint.
func (s *savepoint) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := s.t.inSavepoint(ctx, sql); err != nil {
		return errs.NewRows(err), err
	}
	return s.Tx.Query(ctx, sql, args...)
}

// QueryRow runs a query for one row in the savepoint.
func (s *savepoint) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := s.t.inSavepoint(ctx, sql); err != nil {
		return errs.NewRows(err)
	}
	return s.Tx.QueryRow(ctx, sql, args...)
}

// Conn returns the connection, or nil once the attempt has ended.
func (s *savepoint) Conn() *pgx.Conn { return s.t.Conn() }
