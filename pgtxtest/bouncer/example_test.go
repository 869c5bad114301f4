package bouncer_test

import (
	"context"
	"testing"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/bouncer"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// The examples need a server, so they are compiled but not run. Each is the body of
// a test function, whose t they use, in a test package whose TestMain is
//
//	func TestMain(m *testing.M) { pgtxtest.Main(m) }

// New puts a PgBouncer in transaction pooling mode in front of the shared
// server.
func ExampleNew() {
	var t *testing.T // the test's

	srv := server.Shared(t)
	b := bouncer.New(t, srv, &bouncer.Config{Mode: bouncer.PoolTransaction, DefaultPoolSize: 2})
	dsn, err := server.DSNWithAddr(pgtxtest.NewDatabase(t), b.Addr()) // the database, through the bouncer
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgtx.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
}
