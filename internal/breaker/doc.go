// Package breaker is the state machine of a circuit breaker: it counts how
// the calls it lets through end and refuses calls while its rules say the
// service behind it is failing or slow.
package breaker
