package pgtxsql

import (
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// maxShapes bounds how many query texts shapes remembers: a program that
// makes its query texts up (IN lists of every length) fills it once, and
// its later texts are asked with result formats.
const maxShapes = 4096

// shapes remembers, for each query text seen, whether its results come in
// the formats pgx's stdlib asks for without asking: every column of a type
// rows converts from binary ([resultFormats]) or of a type pgx receives as
// text. Such a query needs no result formats, so in a transaction it can
// share a write (pgx's batches take no result formats): as the first
// statement it travels with BEGIN (the second time a query text begins a
// transaction, it costs no round trip of its own), and a later one carries
// the read of the transaction's id while that is unknown. The results of a
// text whose types changed since (a column altered) are converted from
// whatever format came, and the text is remembered anew.
type shapes struct {
	m sync.Map // query text → bool: native
	n atomic.Int32
}

// native reports that query is known to need no result formats.
func (s *shapes) native(query string) bool {
	v, ok := s.m.Load(query)
	return ok && v.(bool)
}

// learn remembers what fds, a result of query, say of it.
func (s *shapes) learn(query string, fds []pgconn.FieldDescription, m *pgtype.Map) {
	native := true
	for _, fd := range fds {
		if _, ok := resultFormats[fd.DataTypeOID]; !ok && m.FormatCodeForOID(fd.DataTypeOID) != pgtype.TextFormatCode {
			native = false
			break
		}
	}
	if v, ok := s.m.Load(query); ok {
		if v.(bool) != native {
			s.m.Store(query, native)
		}
		return
	}
	if s.n.Load() < maxShapes {
		s.n.Add(1)
		s.m.Store(query, native)
	}
}
