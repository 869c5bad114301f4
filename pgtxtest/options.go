package pgtxtest

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/failcode"
	"github.com/pgtx-go/pgtx/pgtxtest/server"
)

// Option configures [NewDatabase] and [NewPool]: the server the database is on
// and its schema. Every Option is also a [PoolOption].
type Option interface {
	PoolOption
	database()
}

// PoolOption configures [NewPool]. [WithConfig], [WithProxy] and
// [WithFailEveryCommitOnce] are PoolOptions only, so that NewDatabase, which makes
// no pool, does not take them.
type PoolOption interface {
	apply(*options)
}

// databaseOption is an [Option].
type databaseOption func(*options)

func (f databaseOption) apply(o *options) { f(o) }
func (databaseOption) database()          {}

// poolOption is a [PoolOption] that is not an [Option].
type poolOption func(*options)

func (f poolOption) apply(o *options) { f(o) }

// options is what a list of [Option] values says.
type options struct {
	server    *server.Server
	serverSet bool
	steps     []step
	errs      []error
	configs   []func(*pgtx.Config)
	proxy     *faultproxy.Proxy // WithProxy's proxy, nil when not given
	failEvery string            // WithFailEveryCommitOnce's code, "" when not given
}

// step is one migration: an SQL file's contents or a Go function.
type step struct {
	name string // the file name, or the key of a Go function
	sql  string // an SQL file's contents
	fn   func(context.Context, *pgx.Conn) error
}

// asPoolOptions returns opts as PoolOptions.
func asPoolOptions(opts []Option) []PoolOption {
	po := make([]PoolOption, len(opts))
	for i, opt := range opts {
		po[i] = opt
	}
	return po
}

// collectOptions applies opts, skipping nil ones. Errors in them fail tb.
func collectOptions(tb testing.TB, caller string, opts []PoolOption) *options {
	tb.Helper()
	o := &options{}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(o)
		}
	}
	for _, err := range o.errs {
		tb.Errorf("pgtxtest: %s: %v", caller, err)
	}
	if len(o.errs) > 0 {
		tb.FailNow()
	}
	return o
}

// serverFor returns the server the options name, or the shared one.
func (o *options) serverFor(tb testing.TB) *server.Server {
	tb.Helper()
	if !o.serverSet {
		return server.Shared(tb)
	}
	if o.server == nil || o.server.DSN("") == "" {
		tb.Fatal("pgtxtest: NewDatabase needs a server from server.Shared, server.New or server.NewStandby")
	}
	return o.server
}

// migrateTimeout is the time allowed for building a template, on top of making a
// database.
func (o *options) migrateTimeout() (d time.Duration) {
	if len(o.steps) > 0 {
		d = templateTimeout
	}
	return d
}

// WithServer makes the database on s, a server from [server.Shared] or
// [server.New] (or one that [server.Server.Promote] made a primary: a standby is
// read-only), instead of the shared server. If the server is stopped by the time
// the test ends, there is nothing to drop. A nil s fails the test.
func WithServer(s *server.Server) Option {
	return databaseOption(func(o *options) { o.server, o.serverSet = s, true })
}

// WithMigrations gives the database the schema that the SQL files at the root of
// fsys make: every file whose name ends in ".sql", in lexical order of the names
// (so number them with leading zeros: 0001_accounts.sql, 0002_transfers.sql), except
// the files ending in ".down.sql" (the down migrations of golang-migrate and similar
// tools), which are skipped. Directories are not entered. An [embed.FS] works, as
// does [os.DirFS] (see [WithMigrationsDir]) or a [testing/fstest.MapFS].
//
// Each file is sent as one simple-protocol query, so it may hold several statements
// separated by semicolons; they run in one implicit transaction unless the file has
// BEGIN and COMMIT of its own, and statements that cannot run in a transaction block
// (CREATE INDEX CONCURRENTLY, VACUUM, CREATE DATABASE) must be alone in their file.
// The files run in order on one connection to the new template database, as the
// server's role. Tool-specific annotations (goose's "-- +goose Down", for example)
// are not interpreted: for such tools, call them from [WithMigrate].
//
// The migrations run once per server and set of migrations, not once per test: the
// first NewDatabase that needs them creates a template database named
// pgtxtest_tmpl_<hash> (the hash is over the names and contents of the files, and
// the keys of [WithMigrate] functions, in order), runs them there and marks it as a
// template (IS_TEMPLATE, ALLOW_CONNECTIONS false); every database is then CREATE
// DATABASE ... TEMPLATE that template, a file-level copy. An advisory lock on the
// server serializes the builders, so parallel tests and test binaries sharing a
// server build a template once; changing a file changes the hash, which makes a new
// template. A template that a builder left unfinished (its test binary died) is
// dropped and built again. Templates stay on the server; on a server named by the
// environment, old ones can be dropped with ALTER DATABASE ... IS_TEMPLATE false
// and DROP DATABASE.
//
// When the role may not create databases (see [NewDatabase]), the migrations run
// in each test's own schema, the first in its search_path, for every test: they
// must then create their objects unqualified (not in "public") and not depend on
// being in a database of their own (CREATE EXTENSION installs an extension for the
// whole database, once).
//
// Several migration options add up, in the order given. A file that cannot be read
// fails the test; a migration that fails fails it with the file's name and the
// server's error, and leaves no template behind.
func WithMigrations(fsys fs.FS) Option {
	return databaseOption(func(o *options) {
		steps, err := readMigrations(fsys)
		if err != nil {
			o.errs = append(o.errs, err)
			return
		}
		o.steps = append(o.steps, steps...)
	})
}

// WithMigrationsDir is [WithMigrations] of the directory dir (os.DirFS(dir)); a
// relative dir is relative to the test's working directory, which go test sets to
// the package's directory. A missing directory fails the test.
func WithMigrationsDir(dir string) Option {
	return databaseOption(func(o *options) {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			if err == nil {
				err = fmt.Errorf("%s is not a directory", dir)
			}
			o.errs = append(o.errs, fmt.Errorf("migrations directory: %w", err))
			return
		}
		WithMigrations(os.DirFS(dir)).apply(o)
	})
}

// WithMigrate adds a Go function to the migrations (see [WithMigrations]), run in
// order with the others on conn, a connection to the template database, for
// example to call a migration tool's library. A function cannot be hashed, so key
// names its version: change key whenever what fn does changes, or a template made
// by the old fn is reused. fn must not keep conn, nor leave other connections to
// the template open. An empty key or a nil fn fails the test.
func WithMigrate(key string, fn func(ctx context.Context, conn *pgx.Conn) error) Option {
	return databaseOption(func(o *options) {
		if key == "" || fn == nil {
			o.errs = append(o.errs, fmt.Errorf("WithMigrate needs a key and a function, got key %q and a nil function: %t", key, fn == nil))
			return
		}
		o.steps = append(o.steps, step{name: key, fn: fn})
	})
}

// WithConfig changes the [pgtx.Config] of the pool [NewPool] makes, after it is
// parsed from the database's DSN and before the pool is created, for example to set
// MaxConns or a Tracer. Several add up, in the order given.
func WithConfig(fn func(*pgtx.Config)) PoolOption {
	return poolOption(func(o *options) {
		if fn != nil {
			o.configs = append(o.configs, fn)
		}
	})
}

// WithProxy routes the pool that [NewPool] makes through p, a fault-injecting
// [faultproxy.Proxy] that the test made first for the server the database will be
// on, so that the test can inject faults into the pool's connections (see
// [faultproxy.Proxy.FailCommits]):
//
//	proxy := faultproxy.New(t, server.Shared(t).Addr())
//	pool := pgtxtest.NewPool(t, pgtxtest.WithProxy(proxy))
//
// p must forward to the [server.Server.Addr] of that server: [server.Shared], or the
// one that [WithServer] names. A nil p, a p that forwards to another address, or
// two different proxies fail the test. The proxy stays the caller's: NewPool does
// not close it. One from [faultproxy.New] is closed in the cleanup of the test that
// made it, which, when it was made before NewPool in the same test, runs after the
// pool is closed.
func WithProxy(p *faultproxy.Proxy) PoolOption {
	return poolOption(func(o *options) {
		switch {
		case p == nil:
			o.errs = append(o.errs, fmt.Errorf("WithProxy needs a proxy, got a nil *faultproxy.Proxy: make one with faultproxy.New"))
		case o.proxy != nil && o.proxy != p:
			o.errs = append(o.errs, fmt.Errorf("WithProxy given two proxies (to %s and to %s): a pool goes through one", o.proxy.Upstream(), p.Upstream()))
		default:
			o.proxy = p
		}
	})
}

// WithFailEveryCommitOnce makes [NewPool]'s pool go through a [faultproxy.Proxy] on
// which [faultproxy.Proxy.FailEveryCommitOnce](code) is on from the start: the first
// COMMIT of every transaction fails with SQLSTATE code, 40001 or 40P01, raised by
// the server, and its retry passes. A pgtx transaction function therefore runs
// twice, and what it does outside the transaction (a counter, a message sent, a row
// written on another connection) happens twice, which the test's own assertions
// then see. Without [WithProxy], NewPool makes the proxy and closes it in cleanup,
// after the pool; with WithProxy(p), the rule is turned on on p, which the test can
// then use (to turn the rule off, or read its Stats). Another code fails the test.
func WithFailEveryCommitOnce(code string) PoolOption {
	return poolOption(func(o *options) {
		if err := failcode.Check(code); err != nil {
			o.errs = append(o.errs, fmt.Errorf("WithFailEveryCommitOnce: %w", err))
			return
		}
		o.failEvery = code
	})
}

// readMigrations returns the migrations at the root of fsys, in order.
func readMigrations(fsys fs.FS) ([]step, error) {
	if fsys == nil {
		return nil, fmt.Errorf("WithMigrations: nil fs.FS")
	}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || path.Ext(name) != ".sql" || strings.HasSuffix(name, ".down.sql") {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	steps := make([]step, 0, len(names))
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		steps = append(steps, step{name: name, sql: string(b)})
	}
	return steps, nil
}
