package pgpool

import (
	"testing"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/lifecycle"
)

func TestMain(m *testing.M) { lifecycle.Main(m) }
