package deferred

import (
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/pgtx-go/pgtx/internal/txn"
)

// errResultLost is what a queued query's function reads when the
// statement's result was lost with the connection, and the transaction
// was then found committed.
var errResultLost = errors.New("pgtx: the statement's result was lost with the connection; the transaction committed")

// runQueued runs the functions queued with b's statements over their kept
// results, in order, decoding with conn's types, and returns the first
// error.
func runQueued(conn *pgx.Conn, b *pgx.Batch, kept []*txn.Result) error {
	br := &keptResults{m: conn.TypeMap(), kept: kept}
	var first error
	for _, qq := range b.QueuedQueries {
		if qq.Fn == nil {
			br.i++
			continue
		}
		if err := qq.Fn(br); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// keptResults are a committed batch's results, as pgx.BatchResults.
type keptResults struct {
	m    *pgtype.Map
	kept []*txn.Result
	i    int
}

func (br *keptResults) next() (*txn.Result, error) {
	if br.i >= len(br.kept) {
		return nil, errors.New("pgtx: no result left in the batch")
	}
	r := br.kept[br.i]
	br.i++
	if !r.Read {
		return nil, errResultLost
	}
	return r, nil
}

func (br *keptResults) Exec() (pgconn.CommandTag, error) {
	r, err := br.next()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return r.Tag, nil
}

func (br *keptResults) Query() (pgx.Rows, error) {
	r, err := br.next()
	rows := &keptRows{m: br.m, r: r, err: err, at: -1}
	return rows, err
}

func (br *keptResults) QueryRow() pgx.Row {
	rows, _ := br.Query()
	return keptRow{rows.(*keptRows)}
}

func (br *keptResults) Close() error { return nil }

// Tx is nil: the batch's transaction is pgtx's.
func (br *keptResults) Tx() pgx.Tx { return nil }

// keptRows are a kept result's rows, as pgx.Rows.
type keptRows struct {
	m   *pgtype.Map
	r   *txn.Result
	err error
	at  int
}

func (rows *keptRows) Close()     {}
func (rows *keptRows) Err() error { return rows.err }

func (rows *keptRows) CommandTag() pgconn.CommandTag {
	if rows.r == nil {
		return pgconn.CommandTag{}
	}
	return rows.r.Tag
}

func (rows *keptRows) FieldDescriptions() []pgconn.FieldDescription {
	if rows.r == nil {
		return nil
	}
	return rows.r.Fields
}

func (rows *keptRows) Next() bool {
	if rows.err != nil || rows.r == nil || rows.at+1 >= len(rows.r.Rows) {
		rows.at = len(rows.RawRows())
		return false
	}
	rows.at++
	return true
}

// RawRows returns every row.
func (rows *keptRows) RawRows() [][][]byte {
	if rows.r == nil {
		return nil
	}
	return rows.r.Rows
}

func (rows *keptRows) RawValues() [][]byte {
	if rows.r == nil || rows.at < 0 || rows.at >= len(rows.r.Rows) {
		return nil
	}
	return rows.r.Rows[rows.at]
}

func (rows *keptRows) Scan(dest ...any) error {
	if err := pgx.ScanRow(rows.m, rows.FieldDescriptions(), rows.RawValues(), dest...); err != nil {
		rows.err = err
		return err
	}
	return nil
}

func (rows *keptRows) Values() ([]any, error) {
	fields, raw := rows.FieldDescriptions(), rows.RawValues()
	out := make([]any, len(raw))
	for i, v := range raw {
		if v == nil {
			continue
		}
		f := fields[i]
		if t, ok := rows.m.TypeForOID(f.DataTypeOID); ok {
			val, err := t.Codec.DecodeValue(rows.m, f.DataTypeOID, f.Format, v)
			if err != nil {
				return nil, err
			}
			out[i] = val
			continue
		}
		if f.Format == pgtype.TextFormatCode {
			out[i] = string(v)
		} else {
			out[i] = append([]byte{}, v...)
		}
	}
	return out, nil
}

func (rows *keptRows) Conn() *pgx.Conn { return nil }

func (rows *keptRows) TypeMap() *pgtype.Map { return rows.m }

// keptRow is a kept result's first row, as pgx.Row.
type keptRow struct{ rows *keptRows }

func (r keptRow) Scan(dest ...any) error {
	if r.rows.err != nil {
		return r.rows.err
	}
	if !r.rows.Next() {
		return pgx.ErrNoRows
	}
	return r.rows.Scan(dest...)
}
