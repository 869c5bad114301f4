package leakcheck

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// dump is a runtime.Stack dump with one goroutine of each kind Find must
// tell apart.
const dump = `goroutine 1 [chan receive]:
testing.(*T).Run(0xc000003a00, {0x5c8a1e, 0x8}, 0x5d9a28)
	/usr/local/go/src/testing/testing.go:1751 +0x3ab
testing.runTests.func1(0xc000003a00)
	/usr/local/go/src/testing/testing.go:2168 +0x37

goroutine 7 [select]:
github.com/pgtx-go/pgtx/internal/cancel.(*Canceller).wait(0xc0000a8000)
	/src/internal/cancel/canceller.go:90 +0x85
created by github.com/pgtx-go/pgtx/internal/cancel.New in goroutine 6
	/src/internal/cancel/canceller.go:60 +0x1b0

goroutine 8 [syscall]:
os/signal.signal_recv()
	/usr/local/go/src/runtime/sigqueue.go:152 +0x29
os/signal.loop()
	/usr/local/go/src/os/signal/signal_unix.go:23 +0x13
created by os/signal.Notify.func1.1 in goroutine 1
	/usr/local/go/src/os/signal/signal.go:151 +0x1f

goroutine 9 [GC worker (idle)]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
	/usr/local/go/src/runtime/proc.go:435 +0xce
runtime.gcBgMarkWorker(0xc000028230)
	/usr/local/go/src/runtime/mgc.go:1423 +0xe9
created by runtime.gcBgMarkStartWorkers in goroutine 1
	/usr/local/go/src/runtime/mgc.go:1339 +0x105
`

// TestParseAndIgnore: a dump splits into its goroutines with their state
// and functions, and only the tests' own goroutine is a leak: the test
// runner's, os/signal's and the runtime's are not.
func TestParseAndIgnore(t *testing.T) {
	gs := leakCheckParse([]byte(dump))
	if len(gs) != 4 {
		t.Fatalf("%d goroutines parsed, want 4", len(gs))
	}
	leaked := map[string]bool{"1": false, "7": true, "8": false, "9": false}
	for _, g := range gs {
		if got := !leakCheckIgnored(g); got != leaked[g.id] {
			t.Errorf("goroutine %s [%s] %q: leak = %v, want %v", g.id, g.state, g.funcs, got, leaked[g.id])
		}
	}
	want := []string{"github.com/pgtx-go/pgtx/internal/cancel.(*Canceller).wait", "github.com/pgtx-go/pgtx/internal/cancel.New"}
	if !slices.Equal(gs[1].funcs, want) || gs[1].state != "select" {
		t.Errorf("goroutine 7: %q [%s], want %q [select]", gs[1].funcs, gs[1].state, want)
	}
}

// TestFindSeesAGoroutineUntilItEnds: a goroutine of the test is reported
// while it runs, and no longer once it has ended.
func TestFindSeesAGoroutineUntilItEnds(t *testing.T) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		<-stop
	}()
	mine := func(leaked []string) bool {
		return slices.ContainsFunc(leaked, func(g string) bool { return strings.Contains(g, "TestFindSeesAGoroutineUntilItEnds.func") })
	}
	if leaked := Find(0); !mine(leaked) {
		t.Errorf("Find while a goroutine runs: %q, want that goroutine among them", leaked)
	}
	close(stop)
	<-done
	// Only this test's goroutine is asked about: the test runner's may be
	// caught runnable, not yet waiting, and so reported.
	if leaked := Find(time.Second); mine(leaked) {
		t.Errorf("Find after it ended: %q", leaked)
	}
}
