// Package failover holds the tracer interface a pgtx pool tells of the
// commits a failover can lose, and the data of its events. It has types
// only and imports nothing of pgtx: a tracer implements [Tracer] beside
// pgtx's own interfaces, and a pool whose Config.Tracer does is told.
//
// A standby that replicates asynchronously may lack the last commits its
// primary acknowledged; promoted, it discards them, for every client. A
// resolving pool keeps its latest writing commits (Config.RecentCommits)
// and, when it meets a later run of its server, asks that run about them:
// [Tracer.TraceCommitLost] names each one its history provably lacks.
// docs/lost-commits.md says how to reconcile, and how to make failover
// lossless.
package failover
