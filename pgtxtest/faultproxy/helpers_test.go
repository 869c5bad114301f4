package faultproxy

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// fakeTB records failures and skips; Fatal, FailNow and Skip end the calling
// goroutine, as testing's do. Cleanup functions run when runFakeTB's function
// returns.
type fakeTB struct {
	testing.TB // nil: calling anything else panics, which the test would see
	mu         sync.Mutex
	failed     bool
	skipped    bool
	msgs       []string
	cleanups   []func()
}

func (f *fakeTB) Helper()      {}
func (f *fakeTB) Name() string { return "TestFake" }

func (f *fakeTB) Logf(format string, args ...any) {}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = true
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func (f *fakeTB) FailNow() {
	f.mu.Lock()
	f.failed = true
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) {
	f.mu.Lock()
	f.msgs = append(f.msgs, fmt.Sprint(args...))
	f.mu.Unlock()
	f.FailNow()
}

func (f *fakeTB) Fatalf(format string, args ...any) { f.Fatal(fmt.Sprintf(format, args...)) }

func (f *fakeTB) Skip(args ...any) {
	f.mu.Lock()
	f.skipped = true
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

// messages returns what was reported, one message a line.
func (f *fakeTB) messages() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.msgs, "\n")
}

// runFakeTB runs fn with a fakeTB in a goroutine of its own and waits for it,
// then runs its cleanups, last registered first.
func runFakeTB(fn func(testing.TB)) *fakeTB {
	tb := &fakeTB{}
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
