package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestParseLatencies: -latency takes distinct, non-negative durations in
// order; anything else is a clear error.
func TestParseLatencies(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []time.Duration
		wantErr string
	}{
		{in: "0", want: []time.Duration{0}},
		{in: "0,250us,500us", want: []time.Duration{0, 250 * time.Microsecond, 500 * time.Microsecond}},
		{in: " 1ms , 0 ", want: []time.Duration{time.Millisecond, 0}},
		{in: "250", wantErr: `"250" is not a duration`},
		{in: "0,-1ms", wantErr: "-1ms is negative"},
		{in: "1ms,1000us", wantErr: "1ms is given twice"},
		{in: "", wantErr: `"" is not a duration`},
	} {
		got, err := parseLatencies(tc.in)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: err %v, want one saying %q", tc.in, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestRunBadLatency: a bad -latency is a usage error (exit 2) naming the
// flag, and nothing runs.
func TestRunBadLatency(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-latency", "fast", "overhead"}, &stdout, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2; stderr %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "-latency") {
		t.Errorf("stderr %q does not name -latency", stderr.String())
	}
	o, _, err := parseArgs(nil, &stderr)
	if err != nil || !slices.Equal(o.latencies, []time.Duration{0}) {
		t.Errorf("default -latency: %v, %v; want [0]", o.latencies, err)
	}
}
