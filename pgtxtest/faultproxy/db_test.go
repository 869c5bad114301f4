package faultproxy

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

var dbSeq atomic.Uint64

// newTestDatabase creates an empty database on srv for one test and drops it in
// t.Cleanup. (The per-test databases of package pgtxtest, which imports this
// package, are not at hand here.)
func newTestDatabase(t *testing.T, srv *server.Server) string {
	t.Helper()
	name := fmt.Sprintf("faultproxy_%d_%d", os.Getpid(), dbSeq.Add(1))
	ident := pgx.Identifier{name}.Sanitize()
	admin := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		conn, err := pgx.Connect(ctx, srv.DSN(""))
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := admin("CREATE DATABASE " + ident); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := admin("DROP DATABASE IF EXISTS " + ident + " WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return srv.DSN(name)
}
