package pgtxtest

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

func TestServerMainExitCodes(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	leak := func() { go func() { <-release }() }
	stopOK := func() error { return nil }
	stopFails := func() error { return errors.New("cannot stop") }
	tests := []struct {
		name    string
		m       fakeM
		stop    func() error
		want    int
		wantOut string
	}{
		{name: "tests pass", m: fakeM{code: 0}, stop: stopOK, want: 0},
		{name: "tests fail", m: fakeM{code: 3}, stop: stopOK, want: 3},
		{name: "tests fail and leak: leaks not reported", m: fakeM{code: 3, body: leak}, stop: stopOK, want: 3},
		{name: "a stop fails", m: fakeM{code: 0}, stop: stopFails, want: 1, wantOut: "stopping servers: cannot stop"},
		{name: "a goroutine leaks", m: fakeM{code: 0, body: leak}, stop: stopOK, want: 1, wantOut: "TestServerMainExitCodes.func1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stopped := false
			stop := func() error { stopped = true; return tc.stop() }
			var out strings.Builder
			if got := run(tc.m, stop, &out, goleak.IgnoreCurrent()); got != tc.want {
				t.Errorf("run = %d, want %d", got, tc.want)
			}
			if !stopped {
				t.Error("run did not stop the servers")
			}
			if !strings.Contains(out.String(), tc.wantOut) || (tc.wantOut == "") != (out.Len() == 0) {
				t.Errorf("run printed %q, want %q", out.String(), tc.wantOut)
			}
		})
	}
}
