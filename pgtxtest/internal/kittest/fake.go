package kittest

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// FakeTB records failures and skips; Fatal, FailNow and Skip end the calling
// goroutine, as testing's do. Cleanup functions run when RunFakeTB's function
// returns.
type FakeTB struct {
	testing.TB // nil: calling anything else panics, which the test would see
	mu         sync.Mutex
	failed     bool
	skipped    bool
	msgs       []string
	cleanups   []func()
}

// Helper does nothing.
func (f *FakeTB) Helper() {}

// Name returns a fixed test name.
func (f *FakeTB) Name() string { return "TestFake" }

// Logf drops the message.
func (f *FakeTB) Logf(format string, args ...any) {}

// Errorf records a failure and its message.
func (f *FakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = true
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

// FailNow records a failure and ends the calling goroutine.
func (f *FakeTB) FailNow() {
	f.mu.Lock()
	f.failed = true
	f.mu.Unlock()
	runtime.Goexit()
}

// Fatal records the message and calls FailNow.
func (f *FakeTB) Fatal(args ...any) {
	f.mu.Lock()
	f.msgs = append(f.msgs, fmt.Sprint(args...))
	f.mu.Unlock()
	f.FailNow()
}

// Fatalf records the message and calls FailNow.
func (f *FakeTB) Fatalf(format string, args ...any) { f.Fatal(fmt.Sprintf(format, args...)) }

// Skip records a skip and ends the calling goroutine.
func (f *FakeTB) Skip(args ...any) {
	f.mu.Lock()
	f.skipped = true
	f.mu.Unlock()
	runtime.Goexit()
}

// Cleanup registers fn to run when RunFakeTB's function has returned.
func (f *FakeTB) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

// Failed reports whether a failure was recorded.
func (f *FakeTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// Skipped reports whether a skip was recorded.
func (f *FakeTB) Skipped() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.skipped
}

// Messages returns what was reported, one message a line.
func (f *FakeTB) Messages() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.msgs, "\n")
}

// RunFakeTB runs fn with a FakeTB in a goroutine of its own and waits for it,
// then runs its cleanups, last registered first.
func RunFakeTB(fn func(testing.TB)) *FakeTB {
	tb := &FakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(tb)
	}()
	<-done
	tb.mu.Lock()
	cleanups := tb.cleanups
	tb.cleanups = nil
	tb.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	return tb
}

// FakeEnv is a getenv over a map.
func FakeEnv(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}
