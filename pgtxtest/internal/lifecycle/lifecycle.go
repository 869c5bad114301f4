// Package lifecycle holds what the kit's packages share for the life of a test
// binary: the servers started and not yet stopped, and the leak check that
// pgtxtest.Main runs after the tests.
package lifecycle

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"go.uber.org/goleak"
)

// Stopper is something the kit started that Main stops if its owner did not.
type Stopper interface{ Stop() error }

// The things started and not yet stopped by this test binary.
var registry struct {
	mu   sync.Mutex
	live map[Stopper]struct{}
}

// Register records s as started, so that StopAll stops it.
func Register(s Stopper) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.live == nil {
		registry.live = make(map[Stopper]struct{})
	}
	registry.live[s] = struct{}{}
}

// Unregister records that s is stopped (or stopping).
func Unregister(s Stopper) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	delete(registry.live, s)
}

// Live reports whether s was registered and has not been unregistered since.
func Live(s Stopper) bool {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	_, ok := registry.live[s]
	return ok
}

// StopAll stops everything registered and returns the errors joined.
func StopAll() error {
	registry.mu.Lock()
	live := make([]Stopper, 0, len(registry.live))
	for s := range registry.live {
		live = append(live, s)
	}
	registry.mu.Unlock()

	var errs []error
	for _, s := range live {
		errs = append(errs, s.Stop())
	}
	return errors.Join(errs...)
}

// dockerUsed records that this binary talked to a Docker daemon, whose client and
// testcontainers' reaper keep goroutines for the life of the process.
var dockerUsed atomic.Bool

// MarkDockerUsed records that this binary talked to a Docker daemon.
func MarkDockerUsed() { dockerUsed.Store(true) }

// Main runs the tests, stops what the kit started and checks for leaked
// goroutines, then exits; see pgtxtest.Main.
func Main(m interface{ Run() int }, ignore ...string) {
	os.Exit(Run(m, StopAll, os.Stderr, ignore))
}

// Run is Main without the exit; stop stops the servers, and problems are reported
// to w. Goroutines with a function of ignore in their stack, and those that opts
// tell goleak to ignore, are not leaks.
func Run(m interface{ Run() int }, stop func() error, w io.Writer, ignore []string, opts ...goleak.Option) int {
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
