// Package acked names the commits a failover discarded: it keeps a pool's
// latest acknowledged writing commits (their transaction ids, the run of the
// server that committed them, the call's label and the time), bounded by
// count and age; when the pool meets a later run of its server it asks that
// run about them, once, and reports each one its history provably lacks.
// With the same question it finds out whether the server acknowledges
// commits that no standby has, and says so once, and again when that
// changes.
package acked
