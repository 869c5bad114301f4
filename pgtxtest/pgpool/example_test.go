package pgpool_test

import (
	"context"
	"testing"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/pgpool"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// The examples need servers of the test's own and Pgpool-II, so they are compiled
// but not run. Each is the body of a test function, whose t they use, in a test
// package whose TestMain is
//
//	func TestMain(m *testing.M) { pgtxtest.Main(m) }

// New puts a Pgpool-II in front of a primary and its standby; after the test
// promotes the standby and stops the primary, PromoteNode tells pgpool, and writes
// through it go to the new primary.
func ExampleNew() {
	var t *testing.T // the test's

	primary := server.New(t, nil)
	standby := server.NewStandby(t, primary)
	p := pgpool.New(t, primary, []*server.Server{standby}, &pgpool.Config{NumInitChildren: 4})
	ctx := context.Background()
	pool, err := pgtx.New(ctx, p.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := p.PromoteNode(ctx, 1); err != nil {
		t.Fatal(err)
	}
	nodes, err := p.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node 1 is now %s", nodes[1].Role)
}
