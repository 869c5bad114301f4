// Package dbtx is what sqlc (sql_package "pgx/v5") generates for a small
// schema, written out by hand in exactly that shape so the integration
// tests can prove that one set of generated queries runs on a *pgtx.Pool
// and on the pgx.Tx that pgtx.Transaction hands fn. It is not generated:
// keep its signatures identical to sqlc's output when changing it.
package dbtx

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is sqlc's interface, with the exact signatures it emits for pgx/v5
// when the queries include a :copyfrom query.
type DBTX interface {
	Exec(context.Context, string, ...interface{}) (pgconn.CommandTag, error)
	Query(context.Context, string, ...interface{}) (pgx.Rows, error)
	QueryRow(context.Context, string, ...interface{}) pgx.Row
	CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error)
}

// New returns the queries on db.
func New(db DBTX) *Queries {
	return &Queries{db: db}
}

// Queries runs the queries of query.sql on its DBTX.
type Queries struct {
	db DBTX
}

// WithTx returns the queries on tx.
func (q *Queries) WithTx(tx pgx.Tx) *Queries {
	return &Queries{
		db: tx,
	}
}
