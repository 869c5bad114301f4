package fakepg

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5/pgproto3"
)

// stmt is a parsed statement of the extended protocol.
type stmt struct {
	sql  string
	oids []uint32 // the parameter types the client gave (0: unspecified)
}

// portal is a bound statement: its text, the result formats the client
// asked for, and the answer its Describe got.
type portal struct {
	sql     string
	params  []*string
	formats []int16
	answer  *Answer
}

// extended answers a message of the extended protocol. served is false
// for a message the server does not serve; ok is false when the connection
// is to close.
func (ss *session) extended(m pgproto3.FrontendMessage) (served, ok bool) {
	switch m.(type) {
	case *pgproto3.Parse, *pgproto3.Bind, *pgproto3.Describe, *pgproto3.Execute, *pgproto3.Close:
	default:
		return false, true
	}
	if ss.failed {
		return true, true // skipped until Sync
	}
	switch m := m.(type) {
	case *pgproto3.Parse:
		ss.stmts[m.Name] = stmt{sql: m.Query, oids: slices.Clone(m.ParameterOIDs)}
		ss.send(&pgproto3.ParseComplete{})
	case *pgproto3.Bind:
		st, found := ss.stmts[m.PreparedStatement]
		if !found {
			ss.refuse("26000", fmt.Sprintf("prepared statement %q does not exist", m.PreparedStatement))
			break
		}
		params := make([]*string, len(m.Parameters))
		for i, v := range m.Parameters {
			if v != nil {
				params[i] = new(string)
				*params[i] = string(v)
			}
		}
		ss.portals[m.DestinationPortal] = &portal{sql: st.sql, params: params, formats: slices.Clone(m.ResultFormatCodes)}
		ss.send(&pgproto3.BindComplete{})
	case *pgproto3.Describe:
		ss.describe(m.ObjectType, m.Name)
	case *pgproto3.Execute:
		p, found := ss.portals[m.Portal]
		if !found {
			ss.refuse("34000", fmt.Sprintf("portal %q does not exist", m.Portal))
			break
		}
		ss.s.logStatement(ss.n, p.sql, p.params)
		var a Answer
		if p.answer != nil {
			a = *p.answer
		} else {
			a = ss.answer(p.sql)
		}
		ok, failed := ss.execute(p.sql, a, false, p.formats)
		if !ok {
			return true, false
		}
		ss.failed = failed
	case *pgproto3.Close:
		if m.ObjectType == 'S' {
			delete(ss.stmts, m.Name)
		} else {
			delete(ss.portals, m.Name)
		}
		ss.send(&pgproto3.CloseComplete{})
	}
	return true, true
}

// describe describes a statement ('S': its parameters and its rows) or a
// portal (its rows, in the formats it was bound with).
func (ss *session) describe(kind byte, name string) {
	var sql string
	var formats []int16
	var p *portal
	if kind == 'S' {
		st, found := ss.stmts[name]
		if !found {
			ss.refuse("26000", fmt.Sprintf("prepared statement %q does not exist", name))
			return
		}
		sql = st.sql
		oids := make([]uint32, params(sql))
		for i := range oids {
			oids[i] = 25 // text, unless the client said
			if i < len(st.oids) && st.oids[i] != 0 {
				oids[i] = st.oids[i]
			}
		}
		ss.send(&pgproto3.ParameterDescription{ParameterOIDs: oids})
	} else {
		var found bool
		if p, found = ss.portals[name]; !found {
			ss.refuse("34000", fmt.Sprintf("portal %q does not exist", name))
			return
		}
		sql, formats = p.sql, p.formats
	}
	a := ss.answer(sql)
	if p != nil {
		p.answer = &a
	}
	if a.Columns == nil || a.Code != "" || a.Close {
		ss.send(&pgproto3.NoData{})
		return
	}
	ss.send(rowDescription(a.Columns, formats))
}

// refuse fails a message of the extended protocol: the ones after it are
// skipped until Sync.
func (ss *session) refuse(code, msg string) {
	ss.fail(code, msg)
	ss.failed = true
	if ss.status == 'T' {
		ss.status = 'E'
	}
}

// params returns how many parameters sql has: its highest $n.
func params(sql string) int {
	n := 0
	for i := 0; i < len(sql); i++ {
		if sql[i] != '$' {
			continue
		}
		j := i + 1
		for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
			j++
		}
		if k, err := strconv.Atoi(sql[i+1 : j]); err == nil {
			n = max(n, k)
		}
		i = j - 1
	}
	return n
}

// format returns the format of column i, given the formats the client
// asked for (none: text; one: every column's).
func format(formats []int16, i int) int16 {
	switch {
	case len(formats) == 0:
		return 0
	case len(formats) == 1:
		return formats[0]
	case i < len(formats):
		return formats[i]
	}
	return 0
}

// rowDescription describes columns in the formats asked for.
func rowDescription(cols []Column, formats []int16) *pgproto3.RowDescription {
	fields := make([]pgproto3.FieldDescription, len(cols))
	for i, c := range cols {
		fields[i] = pgproto3.FieldDescription{Name: []byte(c.Name), DataTypeOID: c.OID, DataTypeSize: -1,
			TypeModifier: -1, Format: format(formats, i)}
	}
	return &pgproto3.RowDescription{Fields: fields}
}

// dataRow encodes a row's values in the formats asked for.
func dataRow(row []any, cols []Column, formats []int16) *pgproto3.DataRow {
	values := make([][]byte, len(cols))
	for i := range cols {
		if i >= len(row) || row[i] == nil {
			continue // NULL
		}
		text := fmt.Sprint(row[i])
		values[i] = []byte(text)
		if format(formats, i) == 1 {
			values[i] = binaryValue(text, cols[i].OID)
		}
	}
	return &pgproto3.DataRow{Values: values}
}

// binaryValue is text in the binary format of type oid (a type it does not
// know, and text, as the text's bytes).
func binaryValue(text string, oid uint32) []byte {
	size := 0
	switch oid {
	case 16:
		if text == "true" || text == "t" {
			return []byte{1}
		}
		return []byte{0}
	case 21:
		size = 2
	case 23:
		size = 4
	case 20:
		size = 8
	default:
		return []byte(text)
	}
	v, _ := strconv.ParseInt(text, 10, 64)
	return binary.BigEndian.AppendUint64(nil, uint64(v))[8-size:]
}
