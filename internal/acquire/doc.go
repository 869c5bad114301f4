// Package acquire takes a connection from a pool within bounds (an acquire
// timeout beside the caller's context, a cap on the callers waiting) and
// counts what pgxpool does not: the callers waiting, and the attempts
// holding a connection and since when.
package acquire
