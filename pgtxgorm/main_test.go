package pgtxgorm_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the package's tests and then checks that no goroutine
// outlived them (every *gorm.DB and pool closed). The tests need no server:
// those that do are in the integration module.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
