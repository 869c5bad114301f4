// Package retry runs the attempts of a call until one succeeds or the
// policy ends the call, and decides whether a failed attempt runs again and
// after how long: the Client Backpressure specification's exponential
// backoff with full jitter, the caps, the bound on retrying an unreachable
// server, and the pool's retry budget. The loop takes the contention
// manager's gate, the classes of internal/classify, and callbacks for the
// caller's trace and error, so that it needs nothing of the root.
package retry
