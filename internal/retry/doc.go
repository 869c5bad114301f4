// Package retry decides whether a failed attempt of a transaction runs
// again, and after how long: the Client Backpressure specification's
// exponential backoff with full jitter, the caps, the bound on retrying an
// unreachable server, and the pool's retry budget.
package retry
