package pgpool

import (
	"testing"

	"github.com/pgtx-go/pgtx/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }
