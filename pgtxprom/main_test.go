package pgtxprom

import (
	"testing"

	"github.com/pgtx-go/pgtx/internal/pgtest"
)

// TestMain runs the package's tests, stops the test servers and then checks
// that no goroutine outlived them (every Pool closed, every cancel finished).
func TestMain(m *testing.M) {
	pgtest.Main(m)
}
