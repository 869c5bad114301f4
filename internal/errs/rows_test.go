package errs

import (
	"errors"
	"testing"
)

// TestRows: the rows of a query that could not start hold nothing and
// answer every read with its error.
func TestRows(t *testing.T) {
	failed := errors.New("failed")
	r := NewRows(failed)
	if r.Next() || r.Err() != failed || r.Scan() != failed || r.Conn() != nil || r.TypeMap() != nil ||
		r.FieldDescriptions() != nil || r.RawValues() != nil || r.CommandTag().String() != "" {
		t.Error("the rows hold something")
	}
	if _, err := r.Values(); err != failed {
		t.Errorf("Values: %v", err)
	}
	r.Close()
}
