package bouncer

import (
	"context"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
)

// testContext returns a context that bounds a test's database work.
func testContext(t *testing.T) context.Context {
	t.Helper()
	return kittest.Context(t, testTimeout)
}

// testTimeout bounds every database operation of a bouncer test.
const testTimeout = 60 * time.Second
