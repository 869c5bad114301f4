package txn

import "testing"

// TestBeginSQL: the BEGIN statement of each isolation level and flags
// (its statement_timeout is TestStatementTimeout's).
func TestBeginSQL(t *testing.T) {
	tests := []struct {
		iso                  int
		readOnly, deferrable bool
		want                 string
	}{
		{1, false, false, "begin isolation level READ COMMITTED"},
		{2, true, false, "begin isolation level REPEATABLE READ read only"},
		{3, true, true, "begin isolation level SERIALIZABLE read only deferrable"},
		{3, false, true, "begin isolation level SERIALIZABLE deferrable"},
	}
	for _, tt := range tests {
		if got := BeginSQL(tt.iso, tt.readOnly, tt.deferrable); got != tt.want {
			t.Errorf("BeginSQL(%d, %v, %v) = %q, want %q", tt.iso, tt.readOnly, tt.deferrable, got, tt.want)
		}
	}
}
