package pgtxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// uniqueKey returns a WithMigrate key no other test or run uses, so that the test
// builds its template itself.
func uniqueKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return t.Name() + "/" + hex.EncodeToString(b)
}

// dropTemplateAtCleanup drops the template database name when the test ends, so
// that the templates of unique keys do not pile up on a server named by the
// environment. Register it before making databases from the template.
func dropTemplateAtCleanup(t *testing.T, s *server.Server, name string) {
	t.Helper()
	t.Cleanup(func() {
		st := stateOf(s)
		st.tmplMu.Lock()
		delete(st.templates, name)
		st.tmplMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
		defer cancel()
		err := withAdmin(ctx, s, func(conn *pgx.Conn) error {
			if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" IS_TEMPLATE false"); err != nil {
				return err
			}
			return dropDatabaseOn(ctx, conn, name)
		})
		if err != nil && !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("drop template %s: %v", name, err)
		}
	})
}

// templateRow returns whether database name exists, is a template and accepts
// connections.
func templateRow(t *testing.T, admin *pgx.Conn, name string) (exists, isTemplate, allowConn bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := admin.QueryRow(ctx, "SELECT datistemplate, datallowconn FROM pg_database WHERE datname = $1", name).Scan(&isTemplate, &allowConn)
	if err == pgx.ErrNoRows {
		return false, false, false
	}
	if err != nil {
		t.Fatalf("look for database %s: %v", name, err)
	}
	return true, isTemplate, allowConn
}

// mapFS makes an fstest.MapFS of file names and contents.
func mapFS(files map[string]string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for name, data := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(data)}
	}
	return fsys
}

// accountsMigrations is a small schema: a seeded table, an index, a file to skip.
var accountsMigrations = mapFS(map[string]string{
	"0001_accounts.sql": `CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL);
		INSERT INTO accounts VALUES (0, 'seed');`,
	"0002_owner_index.sql":      "CREATE INDEX accounts_owner ON accounts (owner);",
	"0002_owner_index.down.sql": "DROP TABLE accounts;",         // a down migration: skipped
	"README.md":                 "not SQL",                      // skipped
	"later/0003_drop.sql":       "DROP TABLE accounts CASCADE;", // in a directory: skipped
})

// Twenty parallel tests each get a database of their own with the migrated
// schema; the migrations run once, into one template.
func TestMigratedDatabasesParallel(t *testing.T) {
	t.Parallel()
	s := server.Shared(t)
	admin := kittest.Connect(t, s.DSN(""))
	var runs atomic.Int64
	key := uniqueKey(t)
	migrate := func(ctx context.Context, conn *pgx.Conn) error {
		runs.Add(1)
		_, err := conn.Exec(ctx, "CREATE TABLE made_in_go (id int)")
		return err
	}
	opts := []Option{WithMigrations(accountsMigrations), WithMigrate(key, migrate)}
	steps := collectOptions(t, "test", asPoolOptions(opts)).steps
	tmpl := templateName(steps)
	dropTemplateAtCleanup(t, s, tmpl)

	const tests = 20
	var mu sync.Mutex
	databases := map[string]bool{}
	t.Run("group", func(t *testing.T) {
		for i := range tests {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				conn := kittest.Connect(t, NewDatabase(t, opts...))
				ctx := testContext(t)
				kittest.ExecOK(t, ctx, conn, "INSERT INTO accounts VALUES ($1, $2)", i+1, fmt.Sprint("owner ", i))
				if got := kittest.QueryString(t, conn, "SELECT string_agg(id::text, ',' ORDER BY id) FROM accounts"); got != fmt.Sprint("0,", i+1) {
					t.Errorf("accounts ids = %s, want the seed row and this test's own: 0,%d", got, i+1)
				}
				if got := kittest.QueryString(t, conn, "SELECT coalesce(to_regclass('accounts_owner')::text, 'none') || ' ' || coalesce(to_regclass('made_in_go')::text, 'none')"); got != "accounts_owner made_in_go" {
					t.Errorf("the index and the table made in Go: %s", got)
				}
				mu.Lock()
				databases[kittest.QueryString(t, conn, "SELECT current_database()::text")] = true
				mu.Unlock()
			})
		}
	})
	if len(databases) != tests {
		t.Errorf("%d tests used %d databases", tests, len(databases))
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the Go migration ran %d times, want once", n)
	}
	if exists, isTemplate, allowConn := templateRow(t, admin, tmpl); !exists || !isTemplate || allowConn {
		t.Errorf("template %s: exists %t, is a template %t, allows connections %t; want true, true, false", tmpl, exists, isTemplate, allowConn)
	}
	for name := range databases {
		if exists(t, admin, "database", name) {
			t.Errorf("database %s still exists after its test", name)
		}
	}
}

// A template is named after its migrations' contents: the same contents share one,
// different ones, or a changed file, make another.
func TestMigrationTemplateNames(t *testing.T) {
	t.Parallel()
	s := server.Shared(t)
	admin := kittest.Connect(t, s.DSN(""))
	dir := t.TempDir()
	write := func(name, sql string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(sql), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	nameOf := func(opts ...Option) string {
		t.Helper()
		return templateName(collectOptions(t, "test", asPoolOptions(opts)).steps)
	}
	noop := func(context.Context, *pgx.Conn) error { return nil }
	tests := []struct {
		name string
		a, b []Option
		same bool
	}{
		{"same files in two file systems", []Option{WithMigrations(accountsMigrations)},
			[]Option{WithMigrations(mapFS(map[string]string{
				"0001_accounts.sql": `CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL);
		INSERT INTO accounts VALUES (0, 'seed');`,
				"0002_owner_index.sql": "CREATE INDEX accounts_owner ON accounts (owner);",
			}))}, true},
		{"a file's contents", []Option{WithMigrations(mapFS(map[string]string{"1.sql": "CREATE TABLE a ()"}))},
			[]Option{WithMigrations(mapFS(map[string]string{"1.sql": "CREATE TABLE b ()"}))}, false},
		{"a file's name", []Option{WithMigrations(mapFS(map[string]string{"1.sql": "CREATE TABLE a ()"}))},
			[]Option{WithMigrations(mapFS(map[string]string{"2.sql": "CREATE TABLE a ()"}))}, false},
		{"contents moved between files", []Option{WithMigrations(mapFS(map[string]string{"1.sql": "CREATE TABLE a (); ", "2.sql": "CREATE TABLE b ()"}))},
			[]Option{WithMigrations(mapFS(map[string]string{"1.sql": "CREATE TABLE a ();", "2.sql": " CREATE TABLE b ()"}))}, false},
		{"the order of the options", []Option{WithMigrate("x", noop), WithMigrate("y", noop)},
			[]Option{WithMigrate("y", noop), WithMigrate("x", noop)}, false},
		{"a function's key", []Option{WithMigrate("v1", noop)}, []Option{WithMigrate("v2", noop)}, false},
		{"a function's key and a file's name", []Option{WithMigrate("1.sql", noop)},
			[]Option{WithMigrations(mapFS(map[string]string{"1.sql": ""}))}, false},
	}
	for _, tc := range tests {
		if got := nameOf(tc.a...) == nameOf(tc.b...); got != tc.same {
			t.Errorf("%s: same template %t, want %t", tc.name, got, tc.same)
		}
	}

	// Two sets of migrations make two templates; a changed file, a third. (The
	// comment keeps the test's templates its own, which it drops.)
	comment := " -- " + uniqueKey(t)
	write("0001_items.sql", "CREATE TABLE items_v1 (id int);"+comment)
	v1 := nameOf(WithMigrationsDir(dir))
	dropTemplateAtCleanup(t, s, v1)
	inV1 := kittest.Connect(t, NewDatabase(t, WithMigrationsDir(dir)))
	other := nameOf(WithMigrations(accountsMigrations))
	inOther := kittest.Connect(t, NewDatabase(t, WithMigrations(accountsMigrations)))
	write("0001_items.sql", "CREATE TABLE items_v2 (id int);"+comment)
	v2 := nameOf(WithMigrationsDir(dir))
	dropTemplateAtCleanup(t, s, v2)
	inV2 := kittest.Connect(t, NewDatabase(t, WithMigrationsDir(dir)))
	if v1 == v2 || v1 == other || v2 == other {
		t.Fatalf("templates %s, %s and %s are not three", v1, v2, other)
	}
	for _, name := range []string{v1, v2, other} {
		if exists, isTemplate, _ := templateRow(t, admin, name); !exists || !isTemplate {
			t.Errorf("template %s: exists %t, is a template %t", name, exists, isTemplate)
		}
	}
	const tables = "SELECT coalesce(string_agg(relname::text, ',' ORDER BY relname), '') FROM pg_class WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace"
	for _, c := range []struct {
		conn *pgx.Conn
		want string
	}{{inV1, "items_v1"}, {inV2, "items_v2"}, {inOther, "accounts"}} {
		if got := kittest.QueryString(t, c.conn, tables); got != c.want {
			t.Errorf("tables %q, want %q", got, c.want)
		}
	}
}

// Builders that share nothing but the server, as test binaries do, build a
// template once; a template left unfinished is built again.
func TestMigrationTemplateBuildersSerialized(t *testing.T) {
	t.Parallel()
	s := server.Shared(t)
	admin := kittest.Connect(t, s.DSN(""))
	ctx := testContext(t)
	var runs atomic.Int64
	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) }) // if the test fails before it does
	steps := []step{{name: uniqueKey(t), fn: func(ctx context.Context, conn *pgx.Conn) error {
		runs.Add(1)
		<-release // the other builders are waiting on the lock meanwhile
		_, err := conn.Exec(ctx, "CREATE TABLE built (id int)")
		return err
	}}}
	name := templateName(steps)
	dropTemplateAtCleanup(t, s, name)

	const builders = 6
	errs := make(chan error, builders)
	for range builders {
		go func() { errs <- buildTemplate(ctx, s, name, steps) }()
	}
	// Wait until one builder migrates and the others wait for its lock.
	kittest.Eventually(t, ctx, 30*time.Second, "builders waiting on the lock", func(ctx context.Context) error {
		var waiting int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND objsubid = 1 AND (classid::bigint << 32 | objid::bigint) = $1`, templateLockKey(name)).Scan(&waiting)
		switch {
		case err != nil:
			return err
		case runs.Load() != 1 || waiting != builders-1:
			return fmt.Errorf("%d builders migrating, %d waiting", runs.Load(), waiting)
		}
		return nil
	})
	releaseOnce.Do(func() { close(release) })
	for range builders {
		if err := <-errs; err != nil {
			t.Errorf("build: %v", err)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the migration ran %d times, want once", n)
	}

	// A template whose builder died is not ready: it is dropped and built again.
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" IS_TEMPLATE false"); err != nil {
		t.Fatal(err)
	}
	if err := buildTemplate(ctx, s, name, steps); err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the migration ran %d times, want twice", n)
	}
	dsn, drop, err := createDatabase(ctx, s, databaseName(t.Name()), steps)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := drop(ctx); err != nil {
			t.Error(err)
		}
	}()
	conn := kittest.Connect(t, dsn)
	if got := kittest.QueryString(t, conn, "SELECT coalesce(to_regclass('built')::text, 'none')"); got != "built" {
		t.Errorf("the rebuilt template's copy has table %q, want built", got)
	}
}

// A failing migration fails the test with the file and the server's error, and
// leaves no template; errors in the options fail it too.
func TestMigrationErrors(t *testing.T) {
	t.Parallel()
	s := server.Shared(t)
	admin := kittest.Connect(t, s.DSN(""))
	broken := mapFS(map[string]string{
		"0001_ok.sql":     "CREATE TABLE fine (id int);",
		"0002_broken.sql": "CREATE TABLE fine (id int); -- " + uniqueKey(t),
	})
	tmpl := templateName(collectOptions(t, "test", []PoolOption{WithMigrations(broken)}).steps)
	tests := []struct {
		name string
		run  func(tb testing.TB)
		want string
	}{
		{"a failing SQL file", func(tb testing.TB) { NewDatabase(tb, WithMigrations(broken)) },
			`migration 0002_broken.sql: ERROR: relation "fine" already exists (SQLSTATE 42P07)`},
		{"a failing function", func(tb testing.TB) {
			NewDatabase(tb, WithMigrate(uniqueKey(t), func(context.Context, *pgx.Conn) error { return fmt.Errorf("no luck") }))
		}, "(WithMigrate): no luck"},
		{"a missing directory", func(tb testing.TB) { NewDatabase(tb, WithMigrationsDir(filepath.Join(t.TempDir(), "none"))) },
			"migrations directory"},
		{"a function without a key", func(tb testing.TB) {
			NewDatabase(tb, WithMigrate("", func(context.Context, *pgx.Conn) error { return nil }))
		}, "WithMigrate needs a key"},
		{"a nil file system", func(tb testing.TB) { NewDatabase(tb, WithMigrations(nil)) }, "nil fs.FS"},
		{"a nil server", func(tb testing.TB) { NewDatabase(tb, WithServer(nil)) }, "needs a server"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := kittest.RunFakeTB(tc.run)
			if !tb.Failed() || !strings.Contains(tb.Messages(), tc.want) {
				t.Errorf("failed %t with %q, want a failure with %q", tb.Failed(), tb.Messages(), tc.want)
			}
		})
	}
	if exists, _, _ := templateRow(t, admin, tmpl); exists {
		t.Errorf("the failed template %s is left on the server", tmpl)
	}
}

// BenchmarkNewDatabase measures making a database: a copy of template0 (no
// migrations) or of a migrated template (twenty tables with indexes), and building
// such a template. Drops are not timed; ms/drop reports them.
func BenchmarkNewDatabase(b *testing.B) {
	s := server.Shared(b)
	var schema strings.Builder
	for i := range 20 {
		fmt.Fprintf(&schema, `CREATE TABLE t%[1]d (id bigserial PRIMARY KEY, name text NOT NULL UNIQUE,
			created timestamptz NOT NULL DEFAULT now(), note text);
			CREATE INDEX t%[1]d_created ON t%[1]d (created);`, i)
	}
	migrations := mapFS(map[string]string{"0001_schema.sql": schema.String()})
	steps, err := readMigrations(migrations)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, bc := range []struct {
		name  string
		steps []step
	}{{"empty", nil}, {"migrated", steps}} {
		b.Run("clone/"+bc.name, func(b *testing.B) {
			_, drop, err := createDatabase(ctx, s, databaseName("warm"), bc.steps) // the template is built here
			if err == nil {
				err = drop(ctx)
			}
			if err != nil {
				b.Fatal(err)
			}
			var drops time.Duration
			for b.Loop() {
				_, drop, err := createDatabase(ctx, s, databaseName(b.Name()), bc.steps)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				start := time.Now()
				if err := drop(ctx); err != nil {
					b.Fatal(err)
				}
				drops += time.Since(start)
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/db")
			b.ReportMetric(float64(drops.Microseconds())/1000/float64(b.N), "ms/drop")
		})
	}
	b.Run("clone/migrated/parallel", func(b *testing.B) { // drops included
		b.SetParallelism(4) // 4 × GOMAXPROCS tests at once
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, drop, err := createDatabase(ctx, s, databaseName(b.Name()), steps)
				if err == nil {
					err = drop(ctx)
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/db+drop")
	})
	b.Run("template build", func(b *testing.B) {
		for b.Loop() {
			random := make([]byte, 8)
			_, _ = rand.Read(random)
			build := append([]step{{name: hex.EncodeToString(random), fn: func(context.Context, *pgx.Conn) error { return nil }}}, steps...)
			name := templateName(build)
			if err := buildTemplate(ctx, s, name, build); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			err := withAdmin(ctx, s, func(conn *pgx.Conn) error {
				if _, err := conn.Exec(ctx, "ALTER DATABASE "+name+" IS_TEMPLATE false"); err != nil {
					return err
				}
				return dropDatabaseOn(ctx, conn, name)
			})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/template")
	})
}

// A template dropped behind this binary's back is made again.
func TestMigrationTemplateDroppedMeanwhile(t *testing.T) {
	t.Parallel()
	s := server.Shared(t)
	admin := kittest.Connect(t, s.DSN(""))
	ctx := testContext(t)
	var runs atomic.Int64
	opt := WithMigrate(uniqueKey(t), func(ctx context.Context, conn *pgx.Conn) error {
		runs.Add(1)
		_, err := conn.Exec(ctx, "CREATE TABLE again (id int)")
		return err
	})
	name := templateName(collectOptions(t, "test", []PoolOption{opt}).steps)
	dropTemplateAtCleanup(t, s, name)
	NewDatabase(t, opt)
	ident := pgx.Identifier{name}.Sanitize()
	kittest.ExecOK(t, ctx, admin, "ALTER DATABASE "+ident+" IS_TEMPLATE false")
	kittest.ExecOK(t, ctx, admin, "DROP DATABASE "+ident)
	conn := kittest.Connect(t, NewDatabase(t, opt))
	if got := kittest.QueryString(t, conn, "SELECT coalesce(to_regclass('again')::text, 'none')"); got != "again" || runs.Load() != 2 {
		t.Errorf("table %q, migration ran %d times; want again and twice", got, runs.Load())
	}
}
