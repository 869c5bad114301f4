package pgtxprom

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the package's tests and then checks that no goroutine
// outlived them (every Pool closed). The tests need no server: the one that
// does (TestCollectorWithServer) is in the integration module.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
