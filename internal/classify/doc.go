// Package classify sorts the errors of a transaction into the classes pgtx
// acts on, by the SQLSTATE of a server's error, the texts of the poolers that
// send their own errors under a generic code, and the network errors of a
// connection that broke or could not be made.
package classify
