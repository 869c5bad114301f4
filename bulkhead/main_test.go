package bulkhead

import (
	"testing"

	"github.com/pgtx-go/pgtx/internal/leakcheck"
)

// TestMain runs the package's tests and then checks that no goroutine
// outlived them (every Pool closed, every cancel finished).
func TestMain(m *testing.M) { leakcheck.Main(m) }
