// Package retry runs the attempts of a call until one succeeds or the
// policy ends the call, and decides whether a failed attempt runs again and
// after how long: the Client Backpressure specification's exponential
// backoff with full jitter, the caps, the bound on retrying an unreachable
// server, and the pool's retry budget. The caller drives a [Call] and runs
// each attempt itself ([Loop.Run] does it for a function), so control goes
// down into the loop; the loop takes the contention manager's gate, the
// classes of internal/classify, a [Tracer] for the caller's events and a
// function for its error, so that it needs nothing of the root.
package retry
