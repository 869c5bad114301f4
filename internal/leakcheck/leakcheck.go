package leakcheck

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// Main runs the tests of m and then checks that no goroutine outlived them
// (every pool closed, every cancel finished): the stacks of all goroutines
// are read until only the test runner's and the runtime's are left, for up
// to 5s. When the tests failed, goroutines they abandoned are expected and
// not reported. It exits with the tests' code, or 1 on a leak.
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := Find(5 * time.Second); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "%d goroutine(s) leaked by the tests:\n\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// Find polls, for up to wait, until no goroutine but the caller,
// the test runner's and the runtime's is left, and returns the stacks of
// those still there when it gives up.
func Find(wait time.Duration) []string {
	deadline := time.Now().Add(wait)
	pause := time.Millisecond
	for {
		leaked := leakCheckFind()
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// leakCheckFind returns the stacks of the goroutines that are not the
// caller's, the test runner's or the runtime's.
func leakCheckFind() []string {
	self := leakCheckParse(leakCheckStacks(false))
	var leaked []string
	for _, g := range leakCheckParse(leakCheckStacks(true)) {
		if len(self) > 0 && g.id == self[0].id || leakCheckIgnored(g) {
			continue
		}
		leaked = append(leaked, g.text)
	}
	return leaked
}

// leakCheckStacks returns runtime.Stack's output, in a buffer large enough
// for all of it.
func leakCheckStacks(all bool) []byte {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, all)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// leakCheckGoroutine is one goroutine of a runtime.Stack dump.
type leakCheckGoroutine struct {
	id    string
	state string   // "chan receive", "select", "IO wait, 2 minutes", ...
	funcs []string // the functions on its stack, innermost first, then its creator
	text  string   // the goroutine's whole entry, for the report
}

// leakCheckParse splits a runtime.Stack dump into its goroutines. An entry
// starts with "goroutine N [state]:" and lists a function line (name and
// arguments), then a tab-indented file:line, for every frame, and may end
// with "created by F in goroutine M".
func leakCheckParse(dump []byte) []leakCheckGoroutine {
	var out []leakCheckGoroutine
	for _, entry := range bytes.Split(bytes.TrimSpace(dump), []byte("\n\n")) {
		lines := strings.Split(string(entry), "\n")
		header, ok := strings.CutPrefix(lines[0], "goroutine ")
		if !ok {
			continue
		}
		g := leakCheckGoroutine{text: string(entry)}
		g.id, _, _ = strings.Cut(header, " ")
		if i, j := strings.Index(header, "["), strings.LastIndex(header, "]"); i >= 0 && j > i {
			g.state = header[i+1 : j]
		}
		for _, l := range lines[1:] {
			switch {
			case l == "" || strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "..."):
				// a frame's file:line, or "...additional frames elided..."
			case strings.HasPrefix(l, "created by "):
				name := strings.TrimPrefix(l, "created by ")
				name, _, _ = strings.Cut(name, " in goroutine ")
				g.funcs = append(g.funcs, name)
			default:
				if i := strings.LastIndex(l, "("); i > 0 {
					l = l[:i]
				}
				g.funcs = append(g.funcs, l)
			}
		}
		out = append(out, g)
	}
	return out
}

// leakCheckIgnored reports the goroutines that are not the tests' doing, as
// goleak's default filters do: the testing package's own (the main test
// runner, tests blocked in Run or Parallel, fuzzing), os/signal's, the
// runtime's (signal handling, tracing, profiling, cgo callbacks).
func leakCheckIgnored(g leakCheckGoroutine) bool {
	if len(g.funcs) == 0 {
		return true
	}
	switch g.funcs[0] {
	case "testing.RunTests", "testing.(*T).Run", "testing.(*T).Parallel", "testing.runFuzzing", "testing.runFuzzTests":
		return strings.HasPrefix(g.state, "chan receive")
	case "os/signal.signal_recv", "os/signal.loop":
		return true
	}
	runtimeOnly := true
	for _, f := range g.funcs {
		switch {
		case strings.HasPrefix(f, "testing.(*M)."), f == "main.main",
			f == "runtime.ensureSigM", f == "runtime.ReadTrace",
			strings.HasPrefix(f, "runtime/trace."), strings.HasPrefix(f, "runtime/pprof.profileWriter"):
			return true
		case !strings.HasPrefix(f, "runtime.") && !strings.HasPrefix(f, "runtime/"):
			runtimeOnly = false
		}
	}
	// cgo's background goroutines sit in a syscall (go.dev/issue/16714).
	return runtimeOnly || strings.HasPrefix(g.state, "syscall") && slices.Contains(g.funcs, "runtime.goexit")
}
