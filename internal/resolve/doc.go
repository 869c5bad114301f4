// Package resolve finds out what became of a transaction whose COMMIT lost
// its answer: it captures, with each connection and transaction, which
// server and which run of it gave the transaction its id, asks a server
// what became of that id, and judges the answer (the outcome table), never
// taking another transaction's answer for this one's.
package resolve
