package pgtxtest

import (
	"testing"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/lifecycle"
)

// Main is what a test package's TestMain calls:
//
//	func TestMain(m *testing.M) { pgtxtest.Main(m) }
//
// It runs the tests, stops every server the kit started (the shared one
// included), then, if the tests passed, looks for goroutines they leaked: a leak
// is printed and fails the run. It exits with the tests' code, or 1 if stopping a
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
	lifecycle.Main(m, ignore...)
}
