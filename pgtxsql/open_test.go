package pgtxsql_test

import (
	"database/sql"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxsql"
)

// unreachable is a server nobody listens on: these tests send nothing, and
// a pool connects only when a statement needs a connection.
const unreachable = "postgres://app@127.0.0.1:1/app?connect_timeout=1"

// newPool returns a pool that the test closes.
func newPool(t *testing.T) *pgtx.Pool {
	t.Helper()
	pool, err := pgtx.New(t.Context(), unreachable)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// openDB returns pgtxsql.OpenDB(pool), closed by the test.
func openDB(t *testing.T, pool *pgtx.Pool) *sql.DB {
	t.Helper()
	db := pgtxsql.OpenDB(pool)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// otherDB is a *sql.DB of pgx's own stdlib driver, not of pgtxsql.
func otherDB(t *testing.T) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(unreachable)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestOpenByName: the driver opens nothing by a name and a connection
// string, even once registered with database/sql.
func TestOpenByName(t *testing.T) {
	db := openDB(t, newPool(t))
	if _, err := db.Driver().Open(unreachable); !errors.Is(err, pgtx.ErrInvalidArgument) {
		t.Errorf("Driver().Open = %v, want an error matching pgtx.ErrInvalidArgument", err)
	}

	const name = "pgtxsql-test"
	if !slices.Contains(sql.Drivers(), name) {
		sql.Register(name, db.Driver())
	}
	byName, err := sql.Open(name, unreachable)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = byName.Close() })
	if err := byName.PingContext(t.Context()); !errors.Is(err, pgtx.ErrInvalidArgument) {
		t.Errorf("Ping of sql.Open(%q, …) = %v, want an error matching pgtx.ErrInvalidArgument", name, err)
	}
}
