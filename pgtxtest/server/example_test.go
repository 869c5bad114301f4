package server_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// The examples need a server, so they are compiled but not run. Each is the body of
// a test function, whose t they use, in a test package whose TestMain is
//
//	func TestMain(m *testing.M) { pgtxtest.Main(m) }

// NewStandby starts a hot standby of a dedicated server; Promote makes it the
// primary, as a failover would.
func ExampleNewStandby() {
	var t *testing.T // the test's

	primary := server.New(t, nil)
	standby := server.NewStandby(t, primary)
	dsn := pgtxtest.NewDatabase(t, pgtxtest.WithServer(primary)) // replicated to the standby
	onStandby, err := server.DSNWithAddr(dsn, standby.Addr())
	if err != nil {
		t.Fatal(err)
	}
	// ... write through dsn, read (a moment later) through onStandby ...
	if err := standby.Promote(context.Background()); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), onStandby) // now a primary: it takes writes
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
}

// Programs, such as examples or benchmarks, start a server with Start, or take
// DATABASE_URL with DatabaseURL.
func ExampleDatabaseURL() {
	ctx := context.Background()
	dsn, cleanup, err := server.DatabaseURL(ctx)
	if err != nil {
		panic(err)
	}
	defer cleanup()
	pool, err := pgtx.New(ctx, dsn)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
}
