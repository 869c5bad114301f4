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
// included), then, if the tests passed, looks for goroutines they leaked: a leak is
// printed and fails the run. It exits with the tests' code, or 1 if stopping a
// server failed or a goroutine leaked. (When tests fail, goroutines they abandoned
// are expected and not reported.)
//
// Each string in ignore names a function as a goroutine's stack trace names it,
// its package path followed by the function, such as
// "github.com/example/app/queue.(*Worker).loop": a goroutine with that function
// anywhere in its stack is not reported. Use it for goroutines that a library
// keeps for the life of the process:
//
//	func TestMain(m *testing.M) {
//		pgtxtest.Main(m, "github.com/example/app/queue.(*Worker).loop")
//	}
//
// The goroutines that the Docker client and testcontainers keep, when the server
// runs in Docker, are not reported either.
func Main(m *testing.M, ignore ...string) {
	os.Exit(run(m, stopAll, os.Stderr, ignore))
}

// run is Main without the exit; stop stops the servers, and problems are reported
// to w. Goroutines with a function of ignore in their stack, and those that opts
// tell goleak to ignore, are not leaks.
func run(m interface{ Run() int }, stop func() error, w io.Writer, ignore []string, opts ...goleak.Option) int {
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintf(w, "pgtxtest: stopping servers: %v\n", err)
		code = max(code, 1)
	}
	if code != 0 {
		return code
	}
	opts = opts[:len(opts):len(opts)] // appends below do not write to the caller's array
	for _, fn := range ignore {
		opts = append(opts, goleak.IgnoreAnyFunction(fn))
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
