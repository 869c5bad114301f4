// Package cancel stops a running statement on the server when its context
// ends (over a cancel pool, with the protocol's cancel request, or by
// closing the connection) and never lets the connection be used again
// until that cancel is confirmed finished.
package cancel
