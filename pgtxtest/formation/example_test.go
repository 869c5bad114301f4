package formation_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/formation"
)

// The examples need pg_auto_failover, so they are compiled but not run. Each is
// the body of a test function, whose t they use, in a test package whose TestMain
// is
//
//	func TestMain(m *testing.M) { pgtxtest.Main(m) }

// New starts a formation; a pool on its multi-host URI follows the primary through
// a switchover.
func ExampleNew() {
	var t *testing.T // the test's

	f := formation.New(t, &formation.Config{Database: "bank"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgtx.New(ctx, f.URI())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := f.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "SELECT 1"); err != nil { // on the new primary
		t.Logf("the first statement after the switchover: %v", err)
	}
	primary, err := f.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("primary now %s on port %d", primary.Name, primary.Port)
}
