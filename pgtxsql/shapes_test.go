package pgtxsql

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

func TestShapes(t *testing.T) {
	m := pgtype.NewMap()
	fields := func(oids ...uint32) []pgconn.FieldDescription {
		fds := make([]pgconn.FieldDescription, len(oids))
		for i, oid := range oids {
			fds[i].DataTypeOID = oid
		}
		return fds
	}
	tests := []struct {
		name   string
		fds    []pgconn.FieldDescription
		native bool
	}{
		{"no columns", nil, true},
		{"integers, bool, timestamptz", fields(pgtype.Int4OID, pgtype.Int8OID, pgtype.BoolOID, pgtype.TimestamptzOID), true},
		{"text and varchar come as text", fields(pgtype.TextOID, pgtype.VarcharOID), true},
		{"numeric comes in binary", fields(pgtype.Int4OID, pgtype.NumericOID), false},
		{"uuid comes in binary", fields(pgtype.UUIDOID), false},
		{"time comes in binary", fields(pgtype.TimeOID), false},
		{"an array comes in binary", fields(pgtype.Int4ArrayOID), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s shapes
			if s.native(tt.name) {
				t.Fatal("native before it was learned")
			}
			s.learn(tt.name, tt.fds, m)
			if got := s.native(tt.name); got != tt.native {
				t.Errorf("native = %v, want %v", got, tt.native)
			}
		})
	}
	t.Run("a text whose types changed is learned anew", func(t *testing.T) {
		var s shapes
		s.learn("q", fields(pgtype.Int4OID), m)
		s.learn("q", fields(pgtype.NumericOID), m)
		if s.native("q") {
			t.Error("native after its column became numeric")
		}
	})
	t.Run("bounded", func(t *testing.T) {
		var s shapes
		for i := range maxShapes + 10 {
			s.learn(fmt.Sprint(i), nil, m)
		}
		if s.native(fmt.Sprint(maxShapes+5)) || !s.native("0") {
			t.Errorf("kept %d texts, want the first %d", s.n.Load(), maxShapes)
		}
	})
}
