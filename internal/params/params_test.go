package params

import (
	"maps"
	"slices"
	"testing"
	"time"
)

// TestSet: an explicit value wins, the connection string's wins over the
// default, a negative value sends nothing; values are whole milliseconds,
// rounded up.
func TestSet(t *testing.T) {
	tests := []struct {
		name   string
		params map[string]string
		v      time.Duration
		want   string // "": not set
	}{
		{"the default", map[string]string{}, 0, "5000"},
		{"explicit", map[string]string{}, 1500 * time.Millisecond, "1500"},
		{"sub-millisecond rounds up", map[string]string{}, time.Microsecond, "1"},
		{"the connection string's wins over the default", map[string]string{"statement_timeout": "777"}, 0, "777"},
		{"its options win over the default", map[string]string{"options": "-c statement_timeout=777"}, 0, ""},
		{"explicit wins over the connection string", map[string]string{"statement_timeout": "777"}, 2 * time.Second, "2000"},
		{"negative leaves the server's setting", map[string]string{}, -1, ""},
		{"negative leaves the connection string's", map[string]string{"statement_timeout": "777"}, -1, "777"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			Set(tt.params, "statement_timeout", tt.v, 5*time.Second)
			if got := tt.params["statement_timeout"]; got != tt.want {
				t.Errorf("statement_timeout = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestAskUTF8: UTF8 is asked for unless the connection string chose an
// encoding, as a parameter or in its options.
func TestAskUTF8(t *testing.T) {
	tests := []struct {
		params map[string]string
		want   map[string]string
	}{
		{map[string]string{}, map[string]string{"client_encoding": "UTF8"}},
		{map[string]string{"client_encoding": "LATIN1"}, map[string]string{"client_encoding": "LATIN1"}},
		{map[string]string{"options": "-c client_encoding=LATIN1"}, map[string]string{"options": "-c client_encoding=LATIN1"}},
	}
	for _, tt := range tests {
		in := maps.Clone(tt.params)
		AskUTF8(tt.params)
		if !maps.Equal(tt.params, tt.want) {
			t.Errorf("AskUTF8(%v) = %v, want %v", in, tt.params, tt.want)
		}
	}
}

func TestMillis(t *testing.T) {
	for d, want := range map[time.Duration]int64{0: 0, time.Nanosecond: 1, time.Millisecond: 1,
		1500 * time.Microsecond: 2, 2 * time.Second: 2000} {
		if got := Millis(d); got != want {
			t.Errorf("Millis(%v) = %d, want %d", d, got, want)
		}
	}
}

// TestDuration: a duration setting read as the server reads it.
func TestDuration(t *testing.T) {
	tests := []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"5000", 5 * time.Second},
		{" 250 ", 250 * time.Millisecond},
		{"1.5", 1500 * time.Microsecond},
		{"500us", 500 * time.Microsecond},
		{"20ms", 20 * time.Millisecond},
		{"3s", 3 * time.Second},
		{"2 min", 2 * time.Minute},
		{"1h", time.Hour},
		{"1d", 24 * time.Hour},
		{"-5", 0},
		{"off", 0},
		{"5 fortnights", 0},
	}
	for _, tt := range tests {
		if got := Duration(tt.v); got != tt.want {
			t.Errorf("Duration(%q) = %v, want %v", tt.v, got, tt.want)
		}
	}
}

// TestOptionsSet: the libpq options forms that set a server parameter.
func TestOptionsSet(t *testing.T) {
	tests := []struct {
		options string
		want    bool
	}{
		{"-c statement_timeout=60000", true},
		{"-cstatement_timeout=60000", true},
		{"--statement_timeout=60000", true},
		{"--statement-timeout=60000", true},
		{"-c work_mem=8MB -c statement_timeout=1s", true},
		{"-c STATEMENT_TIMEOUT=1s", true},
		{"-c work_mem=8MB", false},
		{"-c application_name=statement_timeout\\ 5", false},
		{"-c statement_timeout", false},
		{"", false},
		{"-c", false},
	}
	for _, tt := range tests {
		if got := optionsSet(tt.options, "statement_timeout"); got != tt.want {
			t.Errorf("optionsSet(%q) = %v, want %v", tt.options, got, tt.want)
		}
	}
}

func TestSplitOptions(t *testing.T) {
	tests := []struct {
		s    string
		want []string
	}{
		{"", nil},
		{"  ", nil},
		{"-c a=1\t-c\nb=2", []string{"-c", "a=1", "-c", "b=2"}},
		{`-c application_name=my\ app`, []string{"-c", "application_name=my app"}},
		{`a\\b`, []string{`a\b`}},
		{`trailing\`, []string{`trailing\`}},
	}
	for _, tt := range tests {
		if got := splitOptions(tt.s); !slices.Equal(got, tt.want) {
			t.Errorf("splitOptions(%q) = %q, want %q", tt.s, got, tt.want)
		}
	}
}
