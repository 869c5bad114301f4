// Package txn is one attempt's transaction on one connection: the pgx.Tx
// fn uses, its first write (BEGIN sent with fn's first statement, the
// transaction's id read with it), and its COMMIT and what the answer
// means.
package txn
