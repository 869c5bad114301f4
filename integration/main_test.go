package integration

import (
	"testing"

	"github.com/pgtx-go/pgtx/internal/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Main(m)
}
