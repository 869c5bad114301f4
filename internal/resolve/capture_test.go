package resolve

import (
	"math"
	"strconv"
	"testing"
)

func TestParseUint(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true},
		{"726", 726, true},
		{strconv.FormatUint(math.MaxUint64, 10), math.MaxUint64, true},
		{"18446744073709551616", 0, false}, // MaxUint64 + 1
		{"", 0, false},
		{"-1", 0, false},
		{"12a", 0, false},
		{" 1", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseUint([]byte(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseUint(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseUint([]byte("123456789")) }); n != 0 {
		t.Errorf("parseUint allocates %v times", n)
	}
}

func TestMayResolve(t *testing.T) {
	tests := []struct {
		name   string
		params map[string]string
		want   bool
	}{
		{"PostgreSQL 15", map[string]string{"server_version": "15.8 (Debian 15.8-0+deb12u1)"}, true},
		{"PostgreSQL 13", map[string]string{"server_version": "13.16"}, true},
		{"PostgreSQL 17 beta", map[string]string{"server_version": "17beta1"}, true},
		{"PostgreSQL 12", map[string]string{"server_version": "12.20"}, false},
		{"PostgreSQL 9.6", map[string]string{"server_version": "9.6.24"}, false},
		{"CockroachDB", map[string]string{"server_version": "13.0.0", "crdb_version": "CockroachDB CCL v24.1.0"}, false},
		{"YugabyteDB", map[string]string{"server_version": "15.2-YB-2.25.0.0-b0"}, false},
		{"nothing reported", map[string]string{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MayResolve(func(k string) string { return tt.params[k] }); got != tt.want {
				t.Errorf("MayResolve(%v) = %v, want %v", tt.params, got, tt.want)
			}
		})
	}
}

// TestXidOf: a backend's 32-bit transaction id, with the server's next id,
// gives the full id, across an epoch boundary too.
func TestXidOf(t *testing.T) {
	tests := []struct {
		lo   uint32
		next uint64
		want uint64
	}{
		{730, 800, 730},
		{730, 5<<32 | 800, 5<<32 | 730},
		{0xfffffff0, 5<<32 | 10, 4<<32 | 0xfffffff0}, // the id is from before the wrap
		{5, 10, 5},
	}
	for _, tt := range tests {
		if got := xidOf(tt.lo, tt.next); got != tt.want {
			t.Errorf("xidOf(%d, %d) = %d, want %d", tt.lo, tt.next, got, tt.want)
		}
	}
}
