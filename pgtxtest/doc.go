// Package pgtxtest runs tests against a real PostgreSQL server: it finds or starts
// the server, gives every test a fresh database of its own with the schema of your
// migrations, and puts a fault-injecting proxy between your code and the server, so
// that tests can see what your code does when a COMMIT fails, a connection is cut
// or the network is slow. It also starts a PgBouncer or a streaming standby in
// front of or behind a server, and pg_auto_failover formations whose primary fails
// over.
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
// # The server
//
// The server is chosen once per test binary, when a test first needs it
// ([Shared]), in this order:
//
//  1. The server named by PGTX_TEST_DATABASE_URL, or else by DATABASE_URL: a
//     postgres:// URL or libpq keyword=value pairs. Its role should be allowed to
//     CREATE DATABASE (see [NewDatabase] for what happens otherwise). Test binaries
//     share it: the tests of every package of a go test ./... run use it, each in
//     databases of its own.
//  2. A container started with testcontainers-go, when a Docker daemon answers a
//     ping within two seconds: at DOCKER_HOST, else at the default socket
//     /var/run/docker.sock, else at a rootless daemon's socket (the skip message
//     says where it looked). The image is postgres:15-alpine, or PGTX_TEST_IMAGE.
//     When the container does not start, local binaries are tried.
//  3. A throwaway cluster made from the PostgreSQL server binaries installed on the
//     machine (initdb and postgres), found in PGTX_TEST_PG_BINDIR, pg_config
//     --bindir, the highest /usr/lib/postgresql/*/bin, or PATH. initdb runs once per
//     machine and version, into a template directory in os.TempDir(); each cluster
//     is a copy of it, in /dev/shm when it has room (PGTX_TEST_CLUSTER_DIR chooses
//     another directory), run with fsync off, trust authentication, 127.0.0.1 and a
//     free port. Running as root, the server runs as the "postgres" system user.
//     Local clusters run on Unix systems only; on Linux the kernel stops them if
//     the test binary dies, and the next run removes what they left on disk.
//  4. Otherwise the test is skipped, with a message that says how to get a server.
//
// PGTX_TEST_SERVER=env, docker or local forces that kind of server: no other is
// tried, and when it cannot be had every test that needs a server fails. With
// CI=true (which most CI services set), having no server at all is a failure rather
// than a skip, so that a CI job whose server went missing does not pass by skipping
// every test.
//
// A test that changes server settings or restarts the server uses [Dedicated],
// which starts a local cluster of its own; [Server.Restart], [Server.Crash] and
// [Server.Start] stop and start it. Programs (examples, benchmarks) use [Start] or
// [DatabaseURL] instead of a testing.TB.
//
// # A database per test, with your migrations
//
// [NewDatabase] returns the DSN of a fresh database for one test, dropped when the
// test ends, and [NewPool] a [pgtx.Pool] on one. Tests that each have their own
// database can run in parallel (t.Parallel) without seeing each other's rows.
//
// [WithMigrations] (an fs.FS, such as an embed.FS), [WithMigrationsDir] (a
// directory) and [WithMigrate] (a Go function, for a migration tool's library) give
// the database your schema. The migrations do not run for every test: the first
// test that needs them runs them once into a template database on the server, named
// after a hash of the migrations, and every test's database is a copy of that
// template (CREATE DATABASE ... TEMPLATE), a copy of its files that takes a few
// milliseconds to a few tens for a schema of tens of tables, however long the
// migrations took. Changing a migration changes the hash, and so
// makes a new template; tests running in parallel, and test binaries sharing a
// server, build each template once (an advisory lock on the server serializes
// them).
//
// # Faults
//
// A [Proxy] ([NewProxy]) sits between a client and the server and forwards the
// PostgreSQL protocol, message by message, until told to inject a fault:
//
//   - [Proxy.FailCommits] and [Proxy.FailEveryCommitOnce] make COMMITs fail with a
//     serialization failure (40001) or a deadlock (40P01) that the server itself
//     raises, so the transaction is really rolled back. With FailEveryCommitOnce
//     every transaction's first COMMIT fails and its retry passes: a function run
//     by [pgtx.Transaction] runs twice, and a test sees whether what it does
//     outside the transaction (a message sent, a counter, an e-mail) is safe to
//     repeat. NewPool's [FailEveryCommitOnce] option makes a pool with that fault
//     on from the start, and [WithProxy] routes a pool through a proxy the test
//     made, to inject the other faults into the pool's connections.
//   - [Proxy.CutOnCommit], [Proxy.CutOnCommitReply], [Proxy.CutBeforeForward],
//     [Proxy.CutAfterForward] and [Proxy.CutAll] cut connections, before or after a
//     statement reaches the server, or drop the answer to a COMMIT that was applied.
//   - [Proxy.StallOnCommit] and [Proxy.StallAll] stall connections as a network
//     partition would, until [Proxy.ReleaseStalled].
//   - [Proxy.SlowStatements], [Proxy.SetLatency] and [Proxy.SetConnLatency] slow
//     statements or every message down; [Proxy.RefuseNew] refuses new connections.
//
// [Proxy.Stats] counts what the proxy did; [Proxy.Reset] turns every fault off.
//
// # PgBouncer, standbys and formations
//
// [StartBouncer] starts a PgBouncer in front of a server (pgbouncer is found in
// PGTX_TEST_PGBOUNCER, PATH or /usr/sbin/pgbouncer), in transaction or session
// pooling mode. [StartStandby] starts a hot standby streaming from a [Dedicated]
// server, and [Server.Promote] turns it into a primary, for failover tests.
//
// [StartFormation] starts a pg_auto_failover formation of its own: a monitor and
// two data nodes, node1 the primary and node2 its synchronous secondary, each run by
// pg_autoctl as the kit's process, on free ports of 127.0.0.1. Its failures are the
// real ones: [Formation.Failover] performs a planned switchover,
// [Formation.KillPrimary] kills the primary's postmaster (its keeper restarts it in
// place, or the monitor fails over first), [Formation.StopPrimary] stops the primary
// node so that the monitor promotes the secondary, and [Formation.StartNode] brings
// it back as a secondary. A client connects with [Formation.URI], a multi-host URL
// with target_session_attrs=read-write, and finds the primary wherever it is now.
// [Formation.WaitState] waits for the states the monitor reports, and
// [Formation.Events] returns the monitor's own log of them with its timestamps, so
// a test can tell how long the formation took to settle from how long the client
// took to write again. The monitor checks health every second and gives a draining
// primary three seconds: a switchover takes a few seconds, the promotion after a
// stopped primary five or six, and a formation starts in about six.
//
// # What CI needs
//
// Either the PostgreSQL server binaries (the postgresql package of Debian or
// Ubuntu: apt-get install postgresql) or a Docker daemon, or a server named by
// PGTX_TEST_DATABASE_URL; pgbouncer for the tests that use [StartBouncer]; and
// pg_auto_failover for the local server's major version for those that use
// [StartFormation] (apt-get install postgresql-15-auto-failover, for PostgreSQL 15).
// Tests that use [Dedicated] or [StartStandby] need the local binaries. Set CI=true
// (or PGTX_TEST_SERVER) so that a missing server fails the job instead of skipping
// its tests.
//
// # Environment
//
//   - PGTX_TEST_DATABASE_URL, DATABASE_URL: the server to use.
//   - PGTX_TEST_SERVER: env, docker or local: the only kind of server to use.
//   - PGTX_TEST_IMAGE: the Docker image (default postgres:15-alpine).
//   - PGTX_TEST_PG_BINDIR: the directory of initdb and postgres.
//   - PGTX_TEST_CLUSTER_DIR: where local clusters and formations live.
//   - PGTX_TEST_PGBOUNCER: the pgbouncer binary.
//   - PGTX_TEST_PG_AUTOCTL: the pg_autoctl binary.
//   - PGTX_TEST_VERBOSE=true: let testcontainers-go log.
//   - CI=true: having no server, no PgBouncer for StartBouncer, or no
//     pg_auto_failover for StartFormation fails a test instead of skipping it.
package pgtxtest
