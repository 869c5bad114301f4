// Package rolling counts events over a sliding window of time, for the
// circuit breaker's failure ratio and the retry budget's share of
// successes.
package rolling
