package pgtxgorm_test

import (
	"testing"

	"github.com/pgtx-go/pgtx/pgtxtest"
)

// TestMain runs the package's tests and then stops the kit's servers and
// checks that no goroutine outlived them (every *gorm.DB and pool closed).
// Most tests need no server; those that do get a database of their own
// from the kit.
func TestMain(m *testing.M) {
	pgtxtest.Main(m)
}
