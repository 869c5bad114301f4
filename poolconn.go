package pgtx

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The results of the query methods give their connection back to the pool
// when they are done with it, as pgxpool's own do: rows when closed or read
// to the end, a row when scanned, a batch when closed (or, when the batch
// began a transaction, that transaction when it ends).

// poolRows are the rows of Query, which release their connection.
type poolRows struct {
	r pgx.Rows
	c *pgxpool.Conn
}

func (rows *poolRows) Close() {
	rows.r.Close()
	if rows.c != nil {
		rows.c.Release()
		rows.c = nil
	}
}

func (rows *poolRows) Err() error                    { return rows.r.Err() }
func (rows *poolRows) CommandTag() pgconn.CommandTag { return rows.r.CommandTag() }
func (rows *poolRows) FieldDescriptions() []pgconn.FieldDescription {
	return rows.r.FieldDescriptions()
}
func (rows *poolRows) RawValues() [][]byte  { return rows.r.RawValues() }
func (rows *poolRows) Conn() *pgx.Conn      { return rows.r.Conn() }
func (rows *poolRows) TypeMap() *pgtype.Map { return rows.r.TypeMap() }

func (rows *poolRows) Next() bool {
	n := rows.r.Next()
	if !n {
		rows.Close()
	}
	return n
}

func (rows *poolRows) Scan(dest ...any) error {
	err := rows.r.Scan(dest...)
	if err != nil {
		rows.Close()
	}
	return err
}

func (rows *poolRows) Values() ([]any, error) {
	values, err := rows.r.Values()
	if err != nil {
		rows.Close()
	}
	return values, err
}

// poolRow is the row of QueryRow, which releases its connection when
// scanned, even when Scan panics.
type poolRow struct {
	r pgx.Row
	c *pgxpool.Conn
}

func (row *poolRow) Scan(dest ...any) error {
	defer row.c.Release()
	return row.r.Scan(dest...)
}

// poolBatch is the batch of SendBatch, which releases its connection when
// closed, unless the batch began a transaction: then the transaction owns
// the connection.
type poolBatch struct {
	br pgx.BatchResults
	c  *pgxpool.Conn
	tx *poolTx
}

func (b *poolBatch) Exec() (pgconn.CommandTag, error) { return b.br.Exec() }
func (b *poolBatch) Query() (pgx.Rows, error)         { return b.br.Query() }
func (b *poolBatch) QueryRow() pgx.Row                { return b.br.QueryRow() }

func (b *poolBatch) Close() error {
	err := b.br.Close()
	if b.c != nil {
		b.c.Release()
		b.c = nil
	}
	return err
}

func (b *poolBatch) Tx() pgx.Tx {
	if b.tx == nil {
		return nil
	}
	return b.tx
}

// poolTx is a transaction a batch began, which releases the connection
// when it ends.
type poolTx struct {
	pgx.Tx
	c *pgxpool.Conn
}

func (tx *poolTx) Commit(ctx context.Context) error {
	err := tx.Tx.Commit(ctx)
	tx.release()
	return err
}

func (tx *poolTx) Rollback(ctx context.Context) error {
	err := tx.Tx.Rollback(ctx)
	tx.release()
	return err
}

func (tx *poolTx) release() {
	if tx.c != nil {
		tx.c.Release()
		tx.c = nil
	}
}
