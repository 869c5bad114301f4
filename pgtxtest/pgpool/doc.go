// Package pgpool starts a Pgpool-II in front of a test's primary and its
// standbys, to test a client behind load balancing and failover.
//
// [New] starts one in streaming replication mode in front of a [server.Server]
// from server.New (node 0) and its standbys from server.NewStandby (nodes 1..);
// pgpool is found in PGTX_TEST_PGPOOL, PATH or /usr/sbin/pgpool. It sends writes to
// the primary, balances reads across the nodes, and stops when the test ends.
// [Pgpool.DSN] names a database through it, [Pgpool.Nodes] and
// [Pgpool.Processes] report what SHOW POOL_NODES and SHOW POOL_PROCESSES say, and
// after a test promotes a standby itself ([server.Server.Promote]),
// [Pgpool.PromoteNode] tells pgpool. Without Pgpool-II (apt-get install pgpool2)
// the test is skipped, or fails under CI=true.
package pgpool
