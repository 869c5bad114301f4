// Package pgtxtest runs tests against a real PostgreSQL server: it gives every
// test a fresh database of its own with the schema of your migrations, and a
// [pgtx.Pool] on it, optionally through a fault-injecting proxy, so that tests can
// see what your code does when a COMMIT fails.
//
// A test package wires it in with its TestMain, which stops the servers when the
// tests are done and fails the run if they leaked goroutines:
//
//	func TestMain(m *testing.M) { pgtxtest.Main(m) }
//
// and a test asks for what it needs:
//
//	func TestTransfer(t *testing.T) {
//		t.Parallel()
//		pool := pgtxtest.NewPool(t, pgtxtest.WithMigrationsDir("../migrations"))
//		// pool is a *pgtx.Pool on a database of this test's own, with the
//		// schema of ../migrations/*.sql; it is closed and the database
//		// dropped when the test ends.
//	}
//
// The rest of the kit lives in packages of its own:
//
//   - [github.com/pgtx-go/pgtx/pgtxtest/server]: the PostgreSQL servers (the
//     shared one every database is on by default, from the environment, Docker
//     or the local binaries; servers of a test's own; streaming standbys).
//   - [github.com/pgtx-go/pgtx/pgtxtest/faultproxy]: a proxy that fails COMMITs,
//     cuts, stalls and slows connections.
//   - [github.com/pgtx-go/pgtx/pgtxtest/bouncer]: a PgBouncer in front of a server.
//   - [github.com/pgtx-go/pgtx/pgtxtest/pgpool]: a Pgpool-II in front of a primary and its standbys.
//   - [github.com/pgtx-go/pgtx/pgtxtest/formation]: pg_auto_failover formations
//     whose primary fails over.
//
// # A database per test, with your migrations
//
// NewDatabase returns the DSN of a fresh database for one test, dropped when
// the test ends, and NewPool a pgtx.Pool on one. Tests that each have their own
// database can run in parallel (t.Parallel) without seeing each other's rows.
// The database is on the shared server ([server.Shared]) unless [WithServer]
// names another.
//
// WithMigrations (an fs.FS, such as an embed.FS), WithMigrationsDir (a directory)
// and WithMigrate (a Go function, for a migration tool's library) give the
// database your schema. The migrations do not run for every test: the first
// test that needs them runs them once into a template database on the server,
// named after a hash of the migrations, and every test's database is a copy of
// that template (CREATE DATABASE ... TEMPLATE), a copy of its files that takes
// a few milliseconds to a few tens for a schema of tens of tables, however long
// the migrations took. Changing a migration changes the hash, and so makes a
// new template; tests running in parallel, and test binaries sharing a server,
// build each template once (an advisory lock on the server serializes them).
//
// # Faults
//
// [WithFailEveryCommitOnce] makes NewPool's pool go through a
// [faultproxy.Proxy] on which every transaction's first COMMIT fails with a
// serialization failure (40001) or a deadlock (40P01) that the server itself
// raises, and its retry passes: a function run by pgtx.Transaction runs twice,
// and a test sees whether what it does outside the transaction (a message sent,
// a counter, an e-mail) is safe to repeat. [WithProxy] routes a pool through a
// proxy the test made, to inject the proxy's other faults into the pool's
// connections.
//
// # What CI needs
//
// Either the PostgreSQL server binaries (the postgresql package of Debian or
// Ubuntu: apt-get install postgresql) or a Docker daemon, or a server named
// by PGTX_TEST_DATABASE_URL; pgbouncer for the tests that use bouncer.New;
// and pg_auto_failover for the local server's major version for those that use
// formation.New (apt-get install postgresql-15-auto-failover, for PostgreSQL
// 15). Tests that use [server.New] or [server.NewStandby] need the local
// binaries. Set CI=true (or PGTX_TEST_SERVER) so that a missing server fails the
// job instead of skipping its tests.
//
// # Environment
//
//   - PGTX_TEST_DATABASE_URL, DATABASE_URL: the server to use.
//   - PGTX_TEST_SERVER: env, docker or local: the only kind of server to use.
//   - PGTX_TEST_IMAGE: the Docker image (default postgres:15-alpine).
//   - PGTX_TEST_PG_BINDIR: the directory of initdb and postgres.
//   - PGTX_TEST_CLUSTER_DIR: where local clusters and formations live.
//   - PGTX_TEST_PGBOUNCER: the pgbouncer binary.
//   - PGTX_TEST_PGPOOL: the pgpool binary (Pgpool-II).
//   - PGTX_TEST_PG_AUTOCTL: the pg_autoctl binary.
//   - PGTX_TEST_VERBOSE=true: let testcontainers-go log.
//   - CI=true: having no server, no PgBouncer for bouncer.New, no Pgpool-II
//     for pgpool.New, or no pg_auto_failover for formation.New fails a test
//     instead of skipping it.
package pgtxtest
