// Code in the style sqlc generates; written by hand for this example.

// Package db is the data-access layer of the repository example, shaped
// like the code sqlc generates for pgx/v5: a DBTX interface that a pool, a
// connection and a transaction all satisfy, a Queries type holding one, and
// WithTx to bind the same queries to a transaction.
package db

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what the queries run on: a *pgtx.Pool, a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx.
type DBTX interface {
	Exec(context.Context, string, ...interface{}) (pgconn.CommandTag, error)
	Query(context.Context, string, ...interface{}) (pgx.Rows, error)
	QueryRow(context.Context, string, ...interface{}) pgx.Row
	CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error)
}

// New returns the queries bound to db.
func New(db DBTX) *Queries {
	return &Queries{db: db}
}

// Queries runs the example's queries on a DBTX.
type Queries struct {
	db DBTX
}

// WithTx returns the same queries bound to tx.
func (q *Queries) WithTx(tx pgx.Tx) *Queries {
	return &Queries{
		db: tx,
	}
}
