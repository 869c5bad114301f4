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
)

// dbTimeout bounds creating or dropping one test database, connection included.
const dbTimeout = 30 * time.Second

var dbSeq atomic.Uint64

// NewDatabase creates a fresh, empty database on the shared server for one test and
// returns its DSN. It is dropped in tb.Cleanup (DROP DATABASE ... WITH (FORCE), so
// connections left open do not stop it). When the server is an env DSN whose role
// cannot CREATE DATABASE, NewDatabase creates a fresh schema instead, returns a DSN
// whose search_path is that schema, and drops the schema in cleanup.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	return NewDatabaseOn(tb, Shared(tb))
}

// NewDatabaseOn is NewDatabase on the given server. If the server is stopped by the
// time the test ends, there is nothing to drop.
func NewDatabaseOn(tb testing.TB, s *Server) string {
	tb.Helper()
	if s == nil || s.base == nil {
		tb.Fatal("pgtxtest: NewDatabaseOn needs a server from Shared or Dedicated")
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	dsn, drop, err := createDatabase(ctx, s, databaseName(tb.Name()))
	if err != nil {
		tb.Fatalf("pgtxtest: %v", err)
	}
	tb.Cleanup(func() {
		if s.isStopped() {
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

func (s *Server) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
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

// createDatabase creates the database (or, without the privilege, the schema) and
// returns its DSN and the function that drops it.
func createDatabase(ctx context.Context, s *Server, name string) (string, func(context.Context) error, error) {
	ident := pgx.Identifier{name}.Sanitize()
	err := withAdmin(ctx, s, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+ident+" TEMPLATE template0")
		return err
	})
	if err == nil {
		return s.DSN(name), func(ctx context.Context) error { return dropDatabase(ctx, s, name) }, nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" { // insufficient_privilege
		return "", nil, fmt.Errorf("create database %s on the %s server: %w", name, s.kind, err)
	}
	if serr := withAdmin(ctx, s, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CREATE SCHEMA "+ident)
		return err
	}); serr != nil {
		return "", nil, fmt.Errorf("create database %s: %w; create schema instead: %w", name, err, serr)
	}
	dsn, err := withSearchPath(s.DSN(""), name)
	if err != nil {
		return "", nil, errors.Join(err, dropSchema(ctx, s, name))
	}
	return dsn, func(ctx context.Context) error { return dropSchema(ctx, s, name) }, nil
}

func dropDatabase(ctx context.Context, s *Server, name string) error {
	ident := pgx.Identifier{name}.Sanitize()
	err := withAdmin(ctx, s, func(conn *pgx.Conn) error {
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
	})
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

func dropSchema(ctx context.Context, s *Server, name string) error {
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
func withAdmin(ctx context.Context, s *Server, fn func(*pgx.Conn) error) error {
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
