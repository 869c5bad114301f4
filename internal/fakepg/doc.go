// Package fakepg is a scripted PostgreSQL server for unit tests: it speaks
// enough of the wire protocol (startup, the simple and the extended query
// protocols, the transaction status of ReadyForQuery) for pgx and pgxpool
// to run transactions against it, and lets a test choose each statement's
// answer: success, rows, an error with its SQLSTATE, or a connection that
// closes before answering (an answer lost). What it is not: a database. It
// keeps no data and parses no SQL beyond a statement's first words.
package fakepg
