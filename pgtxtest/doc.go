// Package pgtxtest gives tests a real PostgreSQL server and fresh databases on it.
//
// The server is chosen once per test binary, in this order:
//
//  1. The DSN in PGTX_TEST_DATABASE_URL, or else in DATABASE_URL, when one is set (a
//     postgres:// URL or libpq keyword=value pairs).
//  2. A container started with testcontainers-go (postgres:15-alpine), when a Docker
//     daemon answers a ping within two seconds.
//  3. A throwaway cluster made from the locally installed PostgreSQL server binaries,
//     found in PGTX_TEST_PG_BINDIR, pg_config --bindir, the highest
//     /usr/lib/postgresql/*/bin, or PATH. initdb runs once per machine and version into
//     a template directory in os.TempDir(), guarded by a file lock; each cluster is a
//     copy of it (in /dev/shm when it has room, else os.TempDir(); PGTX_TEST_CLUSTER_DIR
//     overrides), started with fsync off, trust authentication, 127.0.0.1 and a free
//     port. Running as root, the server runs as the "postgres" system user.
//  4. Otherwise the test is skipped with a message that says how to get a server,
//     except when CI=true: there, having no server is a test failure.
//
// A test package wires the harness in with its TestMain, which also stops the servers
// and checks for leaked goroutines:
//
//	func TestMain(m *testing.M) { pgtxtest.Main(m) }
//
// and a test asks for an empty database of its own:
//
//	dsn := pgtxtest.NewDatabase(t) // dropped when the test ends
//
// Tests that change server settings or restart the server use [Dedicated], which
// starts a local cluster of their own. [StartStandby] adds a hot standby streaming
// from such a cluster, which [Server.Promote] turns into a primary; [Server.Crash]
// takes a local server down abruptly with its data kept, and [Server.Start] brings it
// back.
//
// Local clusters run on Unix systems only. On Linux the kernel kills them if the test
// binary dies; the directories such a binary leaves are removed by the next run.
// testcontainers-go logs nothing unless PGTX_TEST_VERBOSE=true.
package pgtxtest
