package lifecycle

import (
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { Main(m) }

// fakeM is a testing.M whose Run returns code after calling body.
type fakeM struct {
	code int
	body func()
}

func (m fakeM) Run() int {
	if m.body != nil {
		m.body()
	}
	return m.code
}

// ignoredLeak and reportedLeak block until release is closed: goroutines that a
// test leaks, one with a function that run is told to ignore, one without.
func ignoredLeak(release <-chan struct{})  { <-release }
func reportedLeak(release <-chan struct{}) { <-release }

const ignoredLeakName = "github.com/pgtx-go/pgtx/pgtxtest/internal/lifecycle.ignoredLeak"

func TestRunExitCodes(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	leak := func() { go func() { <-release }() }
	leakIgnored := func() { go ignoredLeak(release) }
	leakBoth := func() { go ignoredLeak(release); go reportedLeak(release) }
	stopOK := func() error { return nil }
	stopFails := func() error { return errors.New("cannot stop") }
	tests := []struct {
		name      string
		m         fakeM
		stop      func() error
		ignore    []string
		want      int
		wantOut   string
		wantNoOut string // absent from the output
	}{
		{name: "tests pass", m: fakeM{code: 0}, stop: stopOK, want: 0},
		{name: "tests fail", m: fakeM{code: 3}, stop: stopOK, want: 3},
		{name: "tests fail and leak: leaks not reported", m: fakeM{code: 3, body: leak}, stop: stopOK, want: 3},
		{name: "a stop fails", m: fakeM{code: 0}, stop: stopFails, want: 1, wantOut: "stopping servers: cannot stop"},
		{name: "a goroutine leaks", m: fakeM{code: 0, body: leak}, stop: stopOK, want: 1, wantOut: "TestRunExitCodes.func1"},
		{name: "an ignored function leaks", m: fakeM{code: 0, body: leakIgnored}, stop: stopOK, ignore: []string{ignoredLeakName}, want: 0},
		{
			name: "an ignored and another function leak", m: fakeM{code: 0, body: leakBoth}, stop: stopOK,
			ignore: []string{"github.com/example/app.unrelated", ignoredLeakName}, want: 1,
			wantOut: "lifecycle.reportedLeak", wantNoOut: "lifecycle.ignoredLeak",
		},
		{name: "a function not ignored leaks", m: fakeM{code: 0, body: leakIgnored}, stop: stopOK, ignore: []string{"github.com/example/app.unrelated"}, want: 1, wantOut: "lifecycle.ignoredLeak"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stopped := false
			stop := func() error { stopped = true; return tc.stop() }
			var out strings.Builder
			if got := Run(tc.m, stop, &out, tc.ignore, goleak.IgnoreCurrent()); got != tc.want {
				t.Errorf("Run = %d, want %d", got, tc.want)
			}
			if !stopped {
				t.Error("run did not stop the servers")
			}
			if !strings.Contains(out.String(), tc.wantOut) || (tc.wantOut == "") != (out.Len() == 0) {
				t.Errorf("run printed %q, want %q", out.String(), tc.wantOut)
			}
			if tc.wantNoOut != "" && strings.Contains(out.String(), tc.wantNoOut) {
				t.Errorf("run printed %q, want no %q in it", out.String(), tc.wantNoOut)
			}
		})
	}
}
