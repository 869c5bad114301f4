// Package bouncer starts a PgBouncer in front of a test's server, to test a
// client behind transaction or session pooling.
//
// [New] starts one in front of a [server.Server] (pgbouncer is found in
// PGTX_TEST_PGBOUNCER, PATH or /usr/sbin/pgbouncer), in the [PoolMode] and with
// the pool sizes and timeouts of a [Config], and stops it when the test ends.
// [Bouncer.DSN] names a database through it, [Bouncer.Admin] runs a command of
// its admin console (PAUSE, RESUME, RECONNECT). Without pgbouncer the test is
// skipped, or fails under CI=true.
package bouncer
