package txn

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// firstRows are the rows of fn's first query: closing them ends the write
// that carried it (and reads the id after it).
type firstRows struct {
	pgx.Rows
	conn   *pgx.Conn
	close  func() error
	end    func(pgconn.CommandTag, error)
	closed bool
	err    error
}

// Next advances; at the end it ends the write.
func (r *firstRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

// Close closes the rows and ends the write.
func (r *firstRows) Close() {
	r.Rows.Close()
	r.finish()
}

// Err is the rows' error, or the write's.
func (r *firstRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// Conn returns the connection the rows are read from.
func (r *firstRows) Conn() *pgx.Conn { return r.conn }

func (r *firstRows) finish() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	if err := r.close(); err != nil && r.Rows.Err() == nil {
		r.err = err
	}
	r.end(r.Rows.CommandTag(), r.Err())
}

// firstRow is the row of fn's first QueryRow, read as pgx reads one.
type firstRow struct{ rows *firstRows }

// Scan reads the first row into dest, or fails with pgx.ErrNoRows.
func (r firstRow) Scan(dest ...any) error {
	rows := r.rows
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	err := rows.Scan(dest...)
	rows.Close()
	if err != nil {
		return err
	}
	return rows.Err()
}
