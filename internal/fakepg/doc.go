// Package fakepg is a scripted PostgreSQL server for unit tests: it speaks
// enough of the wire protocol (startup, the simple query protocol, the
// transaction status of ReadyForQuery) for pgx and pgxpool to run
// transactions against it, and lets a test choose each statement's answer:
// success, an error with its SQLSTATE, or a connection that closes before
// answering (an answer lost). What it is not: a database. It keeps no data,
// and the extended protocol is out of its scope.
package fakepg
