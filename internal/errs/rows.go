package errs

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Rows is the pgx.Rows (and pgx.Row) of a query that could not start: it
// holds nothing and answers every read with its error.
type Rows struct{ err error }

// NewRows returns the Rows of a query that failed to start with err.
func NewRows(err error) Rows { return Rows{err: err} }

var (
	_ pgx.Rows = Rows{}
	_ pgx.Row  = Rows{}
)

// Close does nothing: there is nothing to close.
func (r Rows) Close() {}

// Err returns the error of the query.
func (r Rows) Err() error { return r.err }

// CommandTag is empty.
func (r Rows) CommandTag() pgconn.CommandTag { return pgconn.CommandTag{} }

// FieldDescriptions is nil.
func (r Rows) FieldDescriptions() []pgconn.FieldDescription { return nil }

// Next reports false: there is no row.
func (r Rows) Next() bool { return false }

// Scan returns the error of the query.
func (r Rows) Scan(...any) error { return r.err }

// Values returns the error of the query.
func (r Rows) Values() ([]any, error) { return nil, r.err }

// RawValues is nil.
func (r Rows) RawValues() [][]byte { return nil }

// Conn is nil: no connection ran the query.
func (r Rows) Conn() *pgx.Conn { return nil }

// TypeMap is nil.
func (r Rows) TypeMap() *pgtype.Map { return nil }
