package pgtxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// exists reports whether a database (or, with schema, a schema) exists.
func exists(t *testing.T, admin *pgx.Conn, catalog, name string) bool {
	t.Helper()
	q := "SELECT count(*)::text FROM pg_database WHERE datname = $1"
	if catalog == "schema" {
		q = "SELECT count(*)::text FROM pg_namespace WHERE nspname = $1"
	}
	return kittest.QueryString(t, admin, q, name) == "1"
}

func TestDatabaseIsolatedAndDropped(t *testing.T) {
	t.Parallel()
	s := server.Shared(t)
	admin := kittest.Connect(t, s.DSN(""))
	var names [2]string
	var leftOpen *pgx.Conn

	t.Run("two databases", func(t *testing.T) {
		dsnA, dsnB := NewDatabase(t), NewDatabase(t)
		if dsnA == dsnB {
			t.Fatalf("NewDatabase returned %q twice", dsnA)
		}
		a, b := kittest.Connect(t, dsnA), kittest.Connect(t, dsnB)
		names[0] = kittest.QueryString(t, a, "SELECT current_database()::text")
		names[1] = kittest.QueryString(t, b, "SELECT current_database()::text")
		if names[0] == names[1] {
			t.Fatalf("both DSNs reach database %q", names[0])
		}
		if got := kittest.QueryString(t, a, "SELECT count(*)::text FROM pg_class WHERE relnamespace = 'public'::regnamespace"); got != "0" {
			t.Errorf("a new database has %s relations in public", got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := a.Exec(ctx, "CREATE TABLE only_in_a (id int)"); err != nil {
			t.Fatal(err)
		}
		if got := kittest.QueryString(t, b, "SELECT coalesce(to_regclass('only_in_a')::text, 'none')"); got != "none" {
			t.Errorf("a table made in one test database is visible in another: %s", got)
		}
		for _, name := range names {
			if !exists(t, admin, "database", name) {
				t.Errorf("database %s is not in pg_database", name)
			}
		}
		// A connection still open when the test ends must not stop the drop.
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		if leftOpen, err = pgx.Connect(ctx, dsnA); err != nil {
			t.Fatal(err)
		}
	})
	if leftOpen != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = leftOpen.Close(ctx)
	}

	for _, name := range names {
		if name != "" && exists(t, admin, "database", name) {
			t.Errorf("database %s still exists after its test's cleanup", name)
		}
	}
}

func TestDatabaseNames(t *testing.T) {
	t.Parallel()
	valid := regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	seen := map[string]bool{}
	for _, testName := range []string{
		"TestX", "TestX/sub_case#01", "Tést/ünï côdé", strings.Repeat("VeryLong", 40), "", "////", "Test/'; DROP DATABASE x; --",
	} {
		for range 50 {
			name := databaseName(testName)
			if !valid.MatchString(name) || len(name) > 63 {
				t.Errorf("databaseName(%q) = %q: not a plain identifier of at most 63 bytes", testName, name)
			}
			if seen[name] {
				t.Errorf("databaseName(%q) = %q twice", testName, name)
			}
			seen[name] = true
		}
	}
}

// A role that may not CREATE DATABASE gets a schema of its own instead.
func TestDatabaseSchemaFallback(t *testing.T) {
	t.Parallel()
	s := server.Shared(t)
	admin := kittest.Connect(t, s.DSN(""))
	if kittest.QueryString(t, admin, "SELECT rolsuper::text FROM pg_roles WHERE rolname = current_user") != "true" {
		t.Skip("the shared server's role is not a superuser and cannot make the role this test needs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	random := make([]byte, 8)
	_, _ = rand.Read(random)
	role, password := "pgtx_limited_"+hex.EncodeToString(random[:4]), hex.EncodeToString(random)
	roleIdent := pgx.Identifier{role}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE ROLE "+roleIdent+" LOGIN NOCREATEDB NOSUPERUSER PASSWORD '"+password+"'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // runs last, after the database below is dropped
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP ROLE IF EXISTS "+roleIdent); err != nil {
			t.Error(err)
		}
	})
	home := NewDatabase(t)
	homeName := kittest.QueryString(t, kittest.Connect(t, home), "SELECT current_database()::text")
	if _, err := admin.Exec(ctx, "GRANT CREATE ON DATABASE "+pgx.Identifier{homeName}.Sanitize()+" TO "+roleIdent); err != nil {
		t.Fatal(err)
	}

	// The limited role's server, as if it came from PGTX_TEST_DATABASE_URL.
	u, err := url.Parse(s.DSN(homeName))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	limited, err := server.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = limited.Stop() })
	if limited.Kind() != server.KindEnv {
		t.Errorf("Kind() = %q", limited.Kind())
	}

	var schema string
	t.Run("schema instead of database", func(t *testing.T) {
		dsn := NewDatabase(t, WithServer(limited))
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(cfg.RuntimeParams["options"], "-csearch_path=") {
			t.Errorf("DSN %q sets no search_path", redact(dsn))
		}
		conn := kittest.Connect(t, dsn)
		schema = kittest.QueryString(t, conn, "SELECT current_schema()::text")
		if !strings.HasPrefix(schema, "pgtx_") {
			t.Errorf("current_schema() = %q, want the test's own schema", schema)
		}
		if got := kittest.QueryString(t, conn, "SELECT current_database()::text"); got != homeName {
			t.Errorf("current_database() = %q, want %q", got, homeName)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, "CREATE TABLE t (id int)"); err != nil {
			t.Fatal(err)
		}
		if got := kittest.QueryString(t, conn, "SELECT schemaname::text FROM pg_tables WHERE tablename = 't'"); got != schema {
			t.Errorf("table t landed in schema %q, want %q", got, schema)
		}
	})
	inHome := kittest.Connect(t, home)
	if schema != "" && exists(t, inHome, "schema", schema) {
		t.Errorf("schema %s still exists after its test's cleanup", schema)
	}

	// With migrations, they run in the test's schema.
	var migrated string
	t.Run("migrations in the schema", func(t *testing.T) {
		conn := kittest.Connect(t, NewDatabase(t, WithServer(limited), WithMigrations(accountsMigrations)))
		migrated = kittest.QueryString(t, conn, "SELECT current_schema()::text")
		if got := kittest.QueryString(t, conn, "SELECT schemaname || '.' || tablename || ' ' || (SELECT count(*) FROM accounts) FROM pg_tables WHERE tablename = 'accounts'"); got != migrated+".accounts 1" {
			t.Errorf("table and rows: %q, want the seeded accounts in %s", got, migrated)
		}
		if got := kittest.QueryString(t, conn, "SELECT coalesce(to_regclass('accounts_owner')::text, 'none')"); got != "accounts_owner" {
			t.Errorf("index: %s", got)
		}
	})
	if migrated == "" || migrated == schema || exists(t, inHome, "schema", migrated) {
		t.Errorf("migrated schema %q: want a new one, dropped after its test", migrated)
	}
}

func TestDatabaseOnZeroServerFails(t *testing.T) {
	t.Parallel()
	for _, s := range []*server.Server{nil, {}} {
		if tb := kittest.RunFakeTB(func(tb testing.TB) { NewDatabase(tb, WithServer(s)) }); !tb.Failed() {
			t.Errorf("NewDatabase(WithServer(%v)) did not fail the test", s)
		}
	}
}

func TestDatabaseOnStoppedServer(t *testing.T) {
	t.Parallel()
	s := server.New(t, nil)
	t.Run("server stopped before cleanup", func(t *testing.T) {
		dsn := NewDatabase(t, WithServer(s))
		kittest.Connect(t, dsn)
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		// The cleanup must not fail for want of a server.
	})
}
