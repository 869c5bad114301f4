// Package server finds or starts the PostgreSQL servers that tests run against:
// the one every test of a binary shares ([Shared]), servers of a test's own
// ([New]) and their standbys ([NewStandby]). Package pgtxtest makes per-test
// databases on them; a test package's TestMain calls pgtxtest.Main, which stops
// them.
//
// The server is chosen once per test binary, when a test first needs it
// ([Shared]), in this order:
//
//  1. The server named by PGTX_TEST_DATABASE_URL, or else by DATABASE_URL: a
//     postgres:// URL or libpq keyword=value pairs. Its role should be allowed to
//     CREATE DATABASE (see pgtxtest.NewDatabase for what happens otherwise). Test binaries
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
// A test that changes server settings or restarts the server uses [New], which
// starts a local cluster of its own configured by a [Config]; [Server.Restart],
// [Server.Crash] and [Server.Start] stop and start it. [NewStandby] starts a hot
// standby streaming from such a server, and [Server.Promote] turns it into a
// primary, for failover tests. Programs (examples, benchmarks) use [Start] or
// [DatabaseURL] instead of a testing.TB; [Open] names a server that runs already.
// [DSNWithAddr] points a DSN at another address: a standby, a proxy, a bouncer.
package server
