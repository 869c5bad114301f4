package pgtxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/lifecycle"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// dbTimeout bounds creating or dropping one test database, connection included.
const dbTimeout = 30 * time.Second

var dbSeq atomic.Uint64

// NewDatabase creates a fresh database for one test and returns its DSN, a
// postgres:// URL. The database is dropped in tb.Cleanup (DROP DATABASE ... WITH
// (FORCE), so connections left open do not stop it).
//
// Without options the database is empty (a copy of template0) and lives on the
// [server.Shared] server. [WithServer] picks another server, and [WithMigrations],
// [WithMigrationsDir] and [WithMigrate] give it a schema: the migrations run once
// per server into a template database, and every test's database is a copy of the
// template, which takes milliseconds (see [WithMigrations]). NewDatabase is safe to
// call from parallel tests and from test binaries that share a server.
//
// When the server's role may not CREATE DATABASE (a server named by the
// environment), NewDatabase creates a schema of its own instead, in the DSN's
// database, returns a DSN whose search_path is that schema, runs the migrations,
// if any, in that schema (every time: there is no template), and drops the schema
// with everything in it in cleanup. See [WithMigrations] for what migrations can do
// there.
//
// A migration that fails fails the test; without a server the test is skipped, or
// fails, as with [server.Shared].
func NewDatabase(tb testing.TB, opts ...Option) string {
	tb.Helper()
	o := collectOptions(tb, "NewDatabase", asPoolOptions(opts))
	return newDatabase(tb, o)
}

// newDatabase makes the database the options describe and registers its drop.
func newDatabase(tb testing.TB, o *options) string {
	tb.Helper()
	s := o.serverFor(tb)
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout+o.migrateTimeout())
	defer cancel()
	dsn, drop, err := createDatabase(ctx, s, databaseName(tb.Name()), o.steps)
	if err != nil {
		tb.Fatalf("pgtxtest: %v", err)
	}
	tb.Cleanup(func() {
		tb.Helper() // a failure to drop is reported at the line of the call
		if !lifecycle.Live(s) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
		defer cancel()
		if err := drop(ctx); err != nil {
			tb.Errorf("pgtxtest: %v", err)
		}
	})
	return dsn
}

// databaseName makes a name that is unique across tests and test binaries and a
// valid lower-case identifier of at most 63 bytes: pgtx_<test>_<seq>_<random>.
func databaseName(testName string) string {
	var b strings.Builder
	underscore := true
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= 28 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			underscore = false
		} else if !underscore {
			b.WriteByte('_')
			underscore = true
		}
	}
	random := make([]byte, 4)
	_, _ = rand.Read(random) // never fails
	return fmt.Sprintf("pgtx_%s_%s_%s",
		strings.Trim(b.String(), "_"), strconv.FormatUint(dbSeq.Add(1), 36), hex.EncodeToString(random))
}

// createDatabase creates the database (or, without the privilege, the schema), with
// the migrations steps applied, and returns its DSN and the function that drops it.
// Without steps the database is a copy of template0; with steps, of the template
// that ensureTemplate makes for them.
func createDatabase(ctx context.Context, s *server.Server, name string, steps []step) (string, func(context.Context) error, error) {
	ident := pgx.Identifier{name}.Sanitize()
	err := errNoCreateDB
	if !stateOf(s).noCreateDB.Load() {
		err = cloneFor(ctx, s, ident, steps)
		if err == nil {
			return s.DSN(name), func(ctx context.Context) error { return dropDatabase(ctx, s, name) }, nil
		}
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "42501" { // insufficient_privilege
			stateOf(s).noCreateDB.Store(true)
			err = fmt.Errorf("%w: %w", errNoCreateDB, err)
		}
		if !errors.Is(err, errNoCreateDB) {
			return "", nil, fmt.Errorf("create database %s on the %s server: %w", name, s.Kind(), err)
		}
	}
	if serr := withAdmin(ctx, s, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CREATE SCHEMA "+ident)
		return err
	}); serr != nil {
		return "", nil, fmt.Errorf("create database %s: %w; create schema instead: %w", name, err, serr)
	}
	drop := func(ctx context.Context) error { return dropSchema(ctx, s, name) }
	dsn, err := withSearchPath(s.DSN(""), name)
	if err == nil && len(steps) > 0 {
		err = migrateDSN(ctx, dsn, steps)
		if err != nil {
			err = fmt.Errorf("migrate schema %s: %w", name, err)
		}
	}
	if err != nil {
		return "", nil, errors.Join(err, drop(ctx))
	}
	return dsn, drop, nil
}

// cloneFor creates the database ident as a copy of template0, or with steps, of
// their template, which it makes first if need be. A template that this binary
// made but someone has since dropped is made again.
func cloneFor(ctx context.Context, s *server.Server, ident string, steps []step) error {
	if len(steps) == 0 {
		return cloneDatabase(ctx, s, ident, "template0")
	}
	for attempt := 0; ; attempt++ {
		source, err := ensureDBTemplate(ctx, s, steps)
		if err != nil {
			return err
		}
		err = cloneDatabase(ctx, s, ident, pgx.Identifier{source}.Sanitize())
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "3D000" && attempt == 0 { // invalid_catalog_name
			stateOf(s).template(source).forget()
			continue
		}
		return err
	}
}

// errNoCreateDB marks a server whose role may not CREATE DATABASE.
var errNoCreateDB = errors.New("the role may not create databases")

// cloneRetryFor bounds cloneDatabase's retries of a template that is in use.
const cloneRetryFor = 10 * time.Second

// cloneDatabase runs CREATE DATABASE ident TEMPLATE source. PostgreSQL refuses to
// copy a template that a session is connected to (55006 object_in_use, "source
// database is being accessed by other users", after waiting 5 seconds itself); the
// harness's own sessions are gone before a template is marked ready, so that is a
// stray session, and the clone is tried again for a while.
func cloneDatabase(ctx context.Context, s *server.Server, ident, source string) error {
	return withAdmin(ctx, s, func(conn *pgx.Conn) error {
		deadline := time.Now().Add(cloneRetryFor)
		pause := 10 * time.Millisecond
		for {
			_, err := conn.Exec(ctx, "CREATE DATABASE "+ident+" TEMPLATE "+source)
			pgErr, ok := errors.AsType[*pgconn.PgError](err)
			if !ok || pgErr.Code != "55006" || time.Now().After(deadline) {
				return err
			}
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return errors.Join(err, ctx.Err())
			case <-t.C:
			}
			pause = min(2*pause, 200*time.Millisecond)
		}
	})
}

func dropDatabase(ctx context.Context, s *server.Server, name string) error {
	if err := withAdmin(ctx, s, func(conn *pgx.Conn) error { return dropDatabaseOn(ctx, conn, name) }); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// dropDatabaseOn drops a database, ending its sessions, on an admin connection.
func dropDatabaseOn(ctx context.Context, conn *pgx.Conn, name string) error {
	ident := pgx.Identifier{name}.Sanitize()
	_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42601" { // syntax_error: a server before 13
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident)
	return err
}

func dropSchema(ctx context.Context, s *server.Server, name string) error {
	err := withAdmin(ctx, s, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
		return err
	})
	if err != nil {
		return fmt.Errorf("drop schema %s: %w", name, err)
	}
	return nil
}

// withAdmin runs fn on a connection to the server's default database.
func withAdmin(ctx context.Context, s *server.Server, fn func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, s.DSN(""))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	err = fn(conn)
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return errors.Join(err, conn.Close(closeCtx))
}

// withSearchPath adds -csearch_path=schema to the options of a URL DSN.
func withSearchPath(dsn, schema string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("add search_path to %s: %w", redact(dsn), err)
	}
	q := u.Query()
	opt := "-csearch_path=" + schema
	if old := q.Get("options"); old != "" {
		opt = old + " " + opt
	}
	q.Set("options", opt)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// redact hides the password of a URL DSN, for error messages.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return u.Redacted()
}
