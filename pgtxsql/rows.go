package pgtxsql

import (
	"context"
	"database/sql/driver"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// rows are a query's rows as database/sql takes them: the values pgx's
// stdlib gives (int64 for the integers, float64, bool, []byte for bytea
// and JSON, time.Time for dates and timestamps, and the text form of
// every other type).
type rows struct {
	ctx   context.Context
	r     pgx.Rows
	m     *pgtype.Map
	b     *binding // the attempt's, whose open rows are counted
	first bool     // the first row was read by QueryContext
	more  bool     // what its Next said
	funcs []valueFunc
	names []string
}

type valueFunc func(src []byte) (driver.Value, error)

func newRows(ctx context.Context, r pgx.Rows, more bool, b *binding) *rows {
	var m *pgtype.Map
	if c := r.Conn(); c != nil {
		m = c.TypeMap()
	} else {
		m = pgtype.NewMap()
	}
	if b != nil {
		b.open.Add(1)
	}
	return &rows{ctx: ctx, r: r, m: m, b: b, first: true, more: more}
}

// Columns implements [driver.Rows].
func (r *rows) Columns() []string {
	if r.names == nil {
		fds := r.r.FieldDescriptions()
		r.names = make([]string, len(fds))
		for i, fd := range fds {
			r.names[i] = fd.Name
		}
	}
	return r.names
}

// Close implements [driver.Rows].
func (r *rows) Close() error {
	if r.r == nil {
		return nil
	}
	r.r.Close()
	err := r.r.Err()
	r.r = nil
	if r.b != nil {
		r.b.open.Add(-1)
	}
	return withContextErr(r.ctx, err)
}

// Next implements [driver.Rows].
func (r *rows) Next(dest []driver.Value) error {
	if r.r == nil {
		return io.EOF
	}
	more := r.more
	if r.first {
		r.first = false
	} else {
		more = r.r.Next()
	}
	if !more {
		if err := r.r.Err(); err != nil {
			return withContextErr(r.ctx, err)
		}
		return io.EOF
	}
	if r.funcs == nil {
		r.plan()
	}
	for i, src := range r.r.RawValues() {
		if src == nil {
			dest[i] = nil
			continue
		}
		v, err := r.funcs[i](src)
		if err != nil {
			return err
		}
		dest[i] = v
	}
	return nil
}

// plan chooses each column's conversion, by its type and format.
func (r *rows) plan() {
	fds := r.r.FieldDescriptions()
	r.funcs = make([]valueFunc, len(fds))
	for i, fd := range fds {
		oid, format := fd.DataTypeOID, fd.Format
		switch oid {
		case pgtype.BoolOID:
			r.funcs[i] = scanAs(r.m, oid, format, func(v bool) (driver.Value, error) { return v, nil })
		case pgtype.ByteaOID, pgtype.JSONOID, pgtype.JSONBOID, pgtype.XMLOID:
			r.funcs[i] = scanAs(r.m, oid, format, func(v []byte) (driver.Value, error) { return v, nil })
		case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
			r.funcs[i] = scanAs(r.m, oid, format, func(v int64) (driver.Value, error) { return v, nil })
		case pgtype.CIDOID, pgtype.OIDOID, pgtype.XIDOID:
			r.funcs[i] = scanAs(r.m, oid, format, func(v pgtype.Uint32) (driver.Value, error) { return v.Value() })
		case pgtype.Float4OID, pgtype.Float8OID:
			r.funcs[i] = scanAs(r.m, oid, format, func(v float64) (driver.Value, error) { return v, nil })
		case pgtype.DateOID:
			r.funcs[i] = scanAs(r.m, oid, format, func(v pgtype.Date) (driver.Value, error) { return v.Value() })
		case pgtype.TimestampOID:
			r.funcs[i] = scanAs(r.m, oid, format, func(v pgtype.Timestamp) (driver.Value, error) { return v.Value() })
		case pgtype.TimestamptzOID:
			r.funcs[i] = scanAs(r.m, oid, format, func(v pgtype.Timestamptz) (driver.Value, error) { return v.Value() })
		default:
			r.funcs[i] = asText(r.m, oid, format)
		}
	}
}

// scanAs converts a value by scanning it into a T.
func scanAs[T any](m *pgtype.Map, oid uint32, format int16, conv func(T) (driver.Value, error)) valueFunc {
	var v T
	plan := m.PlanScan(oid, format, &v)
	return func(src []byte) (driver.Value, error) {
		if err := plan.Scan(src, &v); err != nil {
			return nil, err
		}
		return conv(v)
	}
}

// asText gives a value's text form: as the server wrote it, since every
// type but those plan converts is asked in text ([resultFormats]); a value
// that came in binary (a query whose column types changed since [shapes]
// learned them) is decoded and written again as text with pgx's codecs.
func asText(m *pgtype.Map, oid uint32, format int16) valueFunc {
	if format == pgtype.TextFormatCode {
		return func(src []byte) (driver.Value, error) { return string(src), nil }
	}
	t, ok := m.TypeForOID(oid)
	if !ok {
		return scanAs(m, oid, format, func(v string) (driver.Value, error) { return v, nil })
	}
	return func(src []byte) (driver.Value, error) {
		v, err := t.Codec.DecodeValue(m, oid, format, src)
		if err != nil {
			return nil, err
		}
		text, err := m.Encode(oid, pgtype.TextFormatCode, v, nil)
		if err != nil {
			return nil, err
		}
		return string(text), nil
	}
}

// ColumnTypeDatabaseTypeName implements
// [driver.RowsColumnTypeDatabaseTypeName], as pgx's stdlib does.
func (r *rows) ColumnTypeDatabaseTypeName(i int) string {
	oid := r.r.FieldDescriptions()[i].DataTypeOID
	if t, ok := r.m.TypeForOID(oid); ok {
		return strings.ToUpper(t.Name)
	}
	return strconv.FormatUint(uint64(oid), 10)
}

// ColumnTypeLength implements [driver.RowsColumnTypeLength], as pgx's
// stdlib does.
func (r *rows) ColumnTypeLength(i int) (int64, bool) {
	fd := r.r.FieldDescriptions()[i]
	switch fd.DataTypeOID {
	case pgtype.TextOID, pgtype.ByteaOID:
		return math.MaxInt64, true
	case pgtype.VarcharOID, pgtype.BPCharOID:
		return int64(fd.TypeModifier - varHeaderSize), true
	case pgtype.VarbitOID:
		return int64(fd.TypeModifier), true
	}
	return 0, false
}

// varHeaderSize is what a varchar's type modifier counts beyond its length.
const varHeaderSize = 4

// ColumnTypePrecisionScale implements
// [driver.RowsColumnTypePrecisionScale], as pgx's stdlib does.
func (r *rows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	fd := r.r.FieldDescriptions()[i]
	if fd.DataTypeOID != pgtype.NumericOID {
		return 0, 0, false
	}
	mod := fd.TypeModifier - varHeaderSize
	return int64((mod >> 16) & 0xffff), int64(mod & 0xffff), true
}

// ColumnTypeScanType implements [driver.RowsColumnTypeScanType], with the
// types pgx's stdlib says.
func (r *rows) ColumnTypeScanType(i int) reflect.Type {
	switch r.r.FieldDescriptions()[i].DataTypeOID {
	case pgtype.Float8OID, pgtype.NumericOID:
		return reflect.TypeFor[float64]()
	case pgtype.Float4OID:
		return reflect.TypeFor[float32]()
	case pgtype.Int8OID:
		return reflect.TypeFor[int64]()
	case pgtype.Int4OID:
		return reflect.TypeFor[int32]()
	case pgtype.Int2OID:
		return reflect.TypeFor[int16]()
	case pgtype.BoolOID:
		return reflect.TypeFor[bool]()
	case pgtype.DateOID, pgtype.TimestampOID, pgtype.TimestamptzOID:
		return reflect.TypeFor[time.Time]()
	case pgtype.ByteaOID:
		return reflect.TypeFor[[]byte]()
	}
	return reflect.TypeFor[string]()
}
