package behindpgpool

import (
	"testing"

	"github.com/pgtx-go/pgtx/pgtxtest"
)

func TestMain(m *testing.M) {
	pgtxtest.Main(m)
}
