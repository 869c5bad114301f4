// Package formation starts pg_auto_failover formations whose primary really
// fails over, for tests of what a client does across a failover.
//
// [New] starts a pg_auto_failover formation of its own: a monitor and
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
// pg_autoctl is found in PGTX_TEST_PG_AUTOCTL, PATH or /usr/bin/pg_autoctl; the
// server binaries must have the pgautofailover extension (apt-get install
// postgresql-15-auto-failover, for PostgreSQL 15). Without them the test is
// skipped, or fails under CI=true.
package formation
