// Package behindpgpool tests pgtx behind Pgpool-II, in streaming-replication
// mode with load balancing on, in front of a primary and a standby each
// test starts: transactions kept on their node, first writes that never
// hang Pgpool-II, cancellation, restarts and switchovers, and lost COMMITs
// resolved without detaching a node. It is a package of its own so that
// go test runs it beside the integration suite.
package behindpgpool
