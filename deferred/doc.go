// Package deferred sends the statements of a [pgtx.Transaction] whose
// results fn does not read without a round trip of their own: [Exec]
// queues one to travel with fn's next statement or with COMMIT, and
// [Transaction] runs a [pgx.Batch] as a whole transaction in one write.
//
// A transfer that reads a balance and then defers its two updates and its
// ledger row costs two round trips (pgx.BeginTxFunc: six); a batch of four
// statements costs one. Every guarantee of [pgtx.Transaction] holds: a
// conflict runs the whole transaction again, nothing commits after an
// error, the deadline goes to the server, and a COMMIT whose answer was
// lost is resolved. A deferred statement's result cannot steer fn: a
// condition it depends on belongs in its SQL. See docs/roundtrips.md.
package deferred
