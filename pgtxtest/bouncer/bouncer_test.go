package bouncer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/pgtxtest"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// bouncerEnv is a fresh database on the shared server and a PgBouncer in front of
// the server.
type bouncerEnv struct {
	b   *Bouncer
	db  string // the database's name
	via string // the database's DSN through the bouncer
}

// newBouncerEnv creates a database on the shared server and starts a bouncer with
// opts in front of the server.
func newBouncerEnv(t *testing.T, opts Config) *bouncerEnv {
	t.Helper()
	s := server.Shared(t)
	dsn := pgtxtest.NewDatabase(t, pgtxtest.WithServer(s))
	b := New(t, s, &opts)
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	via, err := server.DSNWithAddr(dsn, b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return &bouncerEnv{b: b, db: cfg.Database, via: via}
}

// bouncerConnConfig parses dsn for exactly one plain-text connection that uses only
// the simple protocol: in transaction mode, the extended protocol's several
// round trips per statement may land on different server connections.
func bouncerConnConfig(t *testing.T, dsn string) *pgx.ConnConfig {
	t.Helper()
	cfg := kittest.ConnConfig(t, dsn)
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return cfg
}

// backendPID returns the pid of the server backend that runs c's next statement.
func backendPID(t *testing.T, ctx context.Context, c *pgx.Conn) int {
	t.Helper()
	var pid int
	if err := c.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatalf("select pg_backend_pid(): %v", err)
	}
	return pid
}

// adminShow runs a SHOW command on the bouncer's admin console and returns its
// rows as column name to value.
func adminShow(t *testing.T, ctx context.Context, b *Bouncer, command string) []map[string]string {
	t.Helper()
	conn, err := pgconn.Connect(ctx, b.AdminDSN())
	if err != nil {
		t.Fatalf("connect to the admin console: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	res, err := conn.Exec(ctx, command).ReadAll()
	if err != nil || len(res) != 1 {
		t.Fatalf("%s: %d results, error %v", command, len(res), err)
	}
	var rows []map[string]string
	for _, r := range res[0].Rows {
		row := make(map[string]string, len(r))
		for i, f := range res[0].FieldDescriptions {
			row[f.Name] = string(r[i])
		}
		rows = append(rows, row)
	}
	return rows
}

// requireBouncerError fails the test unless err is the FATAL error PgBouncer
// sends when it closes a client, with SQLSTATE 08P01 and message msg.
func requireBouncerError(t *testing.T, what string, err error, msg string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		t.Fatalf("%s: got %v, want PgBouncer's FATAL %q", what, err, msg)
	}
	if pgErr.Code != "08P01" || pgErr.Severity != "FATAL" || pgErr.Message != msg {
		t.Fatalf("%s: got %s %s %q, want FATAL 08P01 %q", what, pgErr.Severity, pgErr.Code, pgErr.Message, msg)
	}
}

func TestBouncerQuery(t *testing.T) {
	t.Parallel()
	for _, mode := range []PoolMode{PoolTransaction, PoolSession} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newBouncerEnv(t, Config{Mode: mode})
			ctx := testContext(t)
			c := kittest.ConnectConfig(t, ctx, bouncerConnConfig(t, e.via))
			var db string
			if err := c.QueryRow(ctx, "select current_database()").Scan(&db); err != nil {
				t.Fatalf("select current_database(): %v", err)
			}
			if db != e.db {
				t.Errorf("current_database() = %q through the bouncer, want %q", db, e.db)
			}
			kittest.ExecOK(t, ctx, c, "create table t (id int)")
			tx, err := c.Begin(ctx)
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			if _, err := tx.Exec(ctx, "insert into t values (1), (2)"); err != nil {
				t.Fatalf("insert: %v", err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("commit: %v", err)
			}
			var n int
			if err := c.QueryRow(ctx, "select count(*) from t").Scan(&n); err != nil || n != 2 {
				t.Fatalf("count = %d, %v; want 2", n, err)
			}

			found := false
			for _, row := range adminShow(t, ctx, e.b, "SHOW POOLS") {
				if row["database"] == e.db {
					found = true
					if row["pool_mode"] != string(mode) || row["cl_active"] != "1" {
						t.Errorf("SHOW POOLS row %v: want pool_mode %s and one active client", row, mode)
					}
				}
			}
			if !found {
				t.Errorf("SHOW POOLS has no row for database %s", e.db)
			}
		})
	}
}

func TestBouncerAdmin(t *testing.T) {
	t.Parallel()
	e := newBouncerEnv(t, Config{})
	ctx := testContext(t)
	for _, cmd := range []string{"SHOW POOLS", "SHOW DATABASES", "RELOAD", "RECONNECT " + e.db, "PAUSE " + e.db, "RESUME " + e.db} {
		if err := e.b.Admin(ctx, cmd); err != nil {
			t.Errorf("Admin(%q): %v", cmd, err)
		}
	}
	err := e.b.Admin(ctx, "NO SUCH COMMAND")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !strings.Contains(err.Error(), "pgtxtest: pgbouncer admin command") {
		t.Errorf("Admin of a bad command = %v, want the console's error, wrapped", err)
	}
	if cfg := adminShow(t, ctx, e.b, "SHOW CONFIG"); len(cfg) == 0 {
		t.Error("SHOW CONFIG through AdminDSN returned no rows")
	}
	c := kittest.ConnectConfig(t, ctx, bouncerConnConfig(t, e.via))
	kittest.ExecOK(t, ctx, c, "select 1")
	log, err := os.ReadFile(e.b.LogPath())
	if err != nil {
		t.Fatalf("read the log: %v", err)
	}
	if want := "login attempt: db=" + e.db; !strings.Contains(string(log), want) {
		t.Errorf("the log has no %q:\n%s", want, log)
	}
}

func TestBouncerAnyRole(t *testing.T) {
	t.Parallel()
	s := server.Shared(t)
	if s.Kind() != server.KindLocal {
		t.Skipf("the %s server may ask roles for a password; a role without one works only on a local (trust) server", s.Kind())
	}
	e := newBouncerEnv(t, Config{})
	ctx := testContext(t)
	random := make([]byte, 4)
	_, _ = rand.Read(random)
	role := "pgtx_bouncer_role_" + hex.EncodeToString(random)
	admin := kittest.Connect(t, s.DSN(""))
	if _, err := admin.Exec(ctx, "create role "+role+" login"); err != nil {
		t.Fatalf("create role: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "drop role "+role); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	cfg := bouncerConnConfig(t, e.via)
	cfg.User = role
	c := kittest.ConnectConfig(t, ctx, cfg)
	var user string
	if err := c.QueryRow(ctx, "select current_user").Scan(&user); err != nil || user != role {
		t.Fatalf("current_user = %q, %v; want %q", user, err, role)
	}

	cfg.User = role + "_missing"
	if c, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		_ = c.Close(ctx)
		t.Fatal("a role that does not exist connected through the bouncer")
	}
}

func TestBouncerKill(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		running bool // a statement is running when KILL comes, else the client idles in its transaction
	}{
		{"idle in transaction", false},
		{"statement running", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newBouncerEnv(t, Config{})
			ctx := testContext(t)
			cfg := bouncerConnConfig(t, e.via)
			started := make(chan struct{}, 1)
			cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
				if n.Message == "started" {
					select {
					case started <- struct{}{}:
					default:
					}
				}
			}
			c := kittest.ConnectConfig(t, ctx, cfg)
			kittest.ExecOK(t, ctx, c, "begin")
			kittest.ExecOK(t, ctx, c, "select 1")
			done := make(chan error, 1)
			if tc.running {
				go func() {
					_, err := c.Exec(ctx, "do $$ begin raise notice 'started'; perform pg_sleep(60); end $$")
					done <- err
				}()
				select {
				case <-started:
				case err := <-done:
					t.Fatalf("statement ended early: %v", err)
				}
			}

			if err := e.b.Admin(ctx, "KILL "+e.db); err != nil {
				t.Fatalf("KILL: %v", err)
			}
			var err error
			if tc.running {
				err = <-done
			} else {
				// Reads what PgBouncer sends the idle client, without writing first.
				err = c.PgConn().WaitForNotification(ctx)
			}
			requireBouncerError(t, "client of the killed database", err, "database removed")

			// PgBouncer 1.18 holds new clients of a killed database until RESUME.
			connected := make(chan error, 1)
			go func() {
				c, err := pgx.ConnectConfig(ctx, cfg)
				if err == nil {
					_, err = c.Exec(ctx, "select 1")
					err = errors.Join(err, c.Close(ctx))
				}
				connected <- err
			}()
			hold := time.NewTimer(300 * time.Millisecond)
			defer hold.Stop()
			select {
			case err := <-connected:
				t.Fatalf("a new client of the killed database went through before RESUME (error %v)", err)
			case <-hold.C:
			}
			if err := e.b.Admin(ctx, "RESUME "+e.db); err != nil {
				t.Fatalf("RESUME: %v", err)
			}
			if err := <-connected; err != nil {
				t.Fatalf("new client after RESUME: %v", err)
			}
		})
	}
}
