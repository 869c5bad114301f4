package pgtxtest

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

// dockerUsed records that this binary talked to a Docker daemon, whose client and
// testcontainers' reaper keep goroutines for the life of the process.
var dockerUsed atomic.Bool

// Main is what a test package's TestMain calls:
//
//	func TestMain(m *testing.M) { pgtxtest.Main(m) }
//
// It runs the tests, stops every server this package started (the shared one
// included), then, if the tests passed, looks for goroutines they leaked with
// goleak.Find and the given options: a leak is printed and fails the run. It exits
// with the tests' code, or 1 if stopping a server failed or a goroutine leaked.
// (When tests fail, goroutines they abandoned are expected and not reported.)
func Main(m *testing.M, opts ...goleak.Option) {
	os.Exit(run(m, stopAll, os.Stderr, opts...))
}

// run is Main without the exit; stop stops the servers, and problems are reported
// to w.
func run(m interface{ Run() int }, stop func() error, w io.Writer, opts ...goleak.Option) int {
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintf(w, "pgtxtest: stopping servers: %v\n", err)
		code = max(code, 1)
	}
	if code != 0 {
		return code
	}
	if dockerUsed.Load() {
		opts = append(opts,
			goleak.IgnoreAnyFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		)
	}
	if err := goleak.Find(opts...); err != nil {
		fmt.Fprintf(w, "pgtxtest: goroutines leaked by the tests: %v\n", err)
		return 1
	}
	return 0
}
